import Dispatch
import Foundation

extension Duration {
    var dispatchInterval: DispatchTimeInterval {
        let (seconds, attoseconds) = components
        return .nanoseconds(Int(seconds) * 1_000_000_000 + Int(attoseconds / 1_000_000_000))
    }

    /// "25", "2.5": for "did not answer within N s".
    var secondsText: String {
        let (seconds, attoseconds) = components
        if attoseconds == 0 { return "\(seconds)" }
        return String(format: "%.1f", Double(seconds) + Double(attoseconds) / 1e18)
    }
}
