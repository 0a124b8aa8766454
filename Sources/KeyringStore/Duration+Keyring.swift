import Dispatch
import FoundationEssentials

extension Duration {
    var dispatchInterval: DispatchTimeInterval {
        let (seconds, attoseconds) = components
        return .nanoseconds(Int(seconds) * 1_000_000_000 + Int(attoseconds / 1_000_000_000))
    }

    /// "25", "2.5": for "did not answer within N s".
    var secondsText: String {
        let (seconds, attoseconds) = components
        if attoseconds == 0 { return "\(seconds)" }
        // One decimal, from the exact value (a half rounds up: 0.05 s is "0.1", 0.25 s "0.3").
        let tenths = seconds * 10 + (attoseconds + 50_000_000_000_000_000) / 100_000_000_000_000_000
        return "\(tenths / 10).\(tenths % 10)"
    }
}
