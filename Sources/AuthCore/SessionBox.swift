import Synchronization

/// Hands the session to the listener's callback once it exists, and lets exactly one response complete it.
final class SessionBox: @unchecked Sendable {
    private let lock = Mutex(())
    private var _session: LoginSession?
    private var claimed = false

    var session: LoginSession? {
        get { lock.withLock { _ in _session } }
        set { lock.withLock { _ in _session = newValue } }
    }

    func claim() -> Bool {
        lock.withLock { _ in
            if claimed { return false }
            claimed = true
            return true
        }
    }
}
