import Dispatch
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

extension Duration {
    var dispatchInterval: DispatchTimeInterval {
        let (seconds, attoseconds) = components
        return .nanoseconds(Int(seconds) * 1_000_000_000 + Int(attoseconds / 1_000_000_000))
    }

    /// "25", "2.5": for "did not answer within N s".
    var secondsText: String {
        let (seconds, attoseconds) = components
        if attoseconds == 0 { return "\(seconds)" }
        // One decimal, rounded as printf's "%.1f" rounds (half to even).
        let tenths = Int((Double(seconds) * 10 + Double(attoseconds) / 1e17).rounded(.toNearestOrEven))
        return "\(tenths / 10).\(tenths % 10)"
    }
}
