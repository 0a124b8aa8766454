import FoundationEssentials
import Synchronization

/// What the broker tells the world about its accounts, for front ends that push (D-Bus signals) and for the
/// agent's status line. Carries account names only, never tokens.
public enum BrokerEvent: Sendable, Equatable {
    /// The account's sign-in state changed: signed in, signed out, or the server rejected its refresh token.
    case accountChanged(String)
    /// A token was needed but the account must sign in first (no refresh token, or it was rejected).
    case signInRequired(String)
    /// A confined caller (a forwarded host, a sandboxed app: `by` describes it) needed the account's sign-in, which it
    /// may not start itself: the desktop says who asked (AgentOperations; the broker never knows callers). `caller`
    /// names it by what the agent established (its consent key, or its door), never by what it said of itself (a
    /// host's `program`): notices are counted by it.
    case signInWanted(String, by: String, caller: String)
    case refreshStarted(String)
    case refreshFinished(String)
    case signInStarted(String)
    case signInFinished(String)
    /// The account's sign-in ends at this date, soon (``SignInExpiryWatch``): time to sign in again. `at` is when the
    /// broker gave the warning: a day count shown for it is taken from there (``DaysLeft``), as its journal line's is.
    case signInExpiring(String, validUntil: Date, at: Date)
    /// The configuration in force changed (accounts added, removed or changed by a reload), or its problem did.
    case configurationChanged

    /// The account the event is about; empty for ``configurationChanged``.
    public var account: String {
        switch self {
        case .configurationChanged:
            return ""
        case .accountChanged(let name), .signInRequired(let name), .signInWanted(let name, _, _), .refreshStarted(let name),
             .refreshFinished(let name), .signInStarted(let name), .signInFinished(let name),
             .signInExpiring(let name, _, _):
            return name
        }
    }
}

/// Fans broker events out to any number of subscribers. Publishing never blocks the broker: each subscriber has
/// a bounded buffer that keeps the newest events, so a slow one loses old events rather than stalling sign-ins.
public final class BrokerEventHub: @unchecked Sendable {
    private let lock = Mutex(())
    private var subscribers: [UUID: AsyncStream<BrokerEvent>.Continuation] = [:]

    public init() {}

    /// A stream of the events published from now on; it ends when the subscriber stops iterating it.
    public func subscribe(buffer: Int = 256) -> AsyncStream<BrokerEvent> {
        let (stream, continuation) = AsyncStream<BrokerEvent>.makeStream(bufferingPolicy: .bufferingNewest(buffer))
        let id = UUID()
        lock.withLock { _ in subscribers[id] = continuation }
        continuation.onTermination = { [weak self] _ in
            guard let self else { return }
            _ = self.lock.withLock { _ in self.subscribers.removeValue(forKey: id) }
        }
        return stream
    }

    public func publish(_ event: BrokerEvent) {
        let targets = lock.withLock { _ in Array(subscribers.values) }
        for continuation in targets { continuation.yield(event) }
    }
}
