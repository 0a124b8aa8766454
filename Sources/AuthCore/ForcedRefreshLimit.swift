import Synchronization

/// How often confined callers (sandboxed apps, forwarded hosts: `ClientIdentity.isConfined`) may make the agent
/// refresh an account's token when the cached one is still good (`force_refresh`): at most once per account per
/// ``interval``, for all of them together. A forced refresh beyond that is served the cached token, which is then at
/// most ``interval`` old (the one the last forced refresh got), without an error. Programs of the desktop are not
/// limited (AgentOperations asks only for confined callers).
///
/// Why: every forced refresh is a token-endpoint call and, with rotation, a new refresh token written to the keyring.
/// An app looping on `force_refresh` would otherwise hammer the user's authorization server (which may throttle or
/// lock the client) and churn the keyring item. A caller whose token a resource server refused wants a newer one:
/// a token minted within the interval is that newer one, whoever asked for it.
public final class ForcedRefreshLimit: Sendable {
    /// One forced refresh per account per minute for all confined callers together.
    public static let defaultInterval: Duration = .seconds(60)

    public let interval: Duration
    private let time: any TimeSource
    /// When each account's last honoured forced refresh was asked.
    private let last = Mutex<[String: ContinuousClock.Instant]>([:])

    public init(interval: Duration = ForcedRefreshLimit.defaultInterval, time: any TimeSource) {
        self.interval = interval
        self.time = time
    }

    /// Whether a confined caller's forced refresh of `account` is honoured now; an honoured one is counted.
    public func admit(_ account: String) -> Bool {
        let now = time.now()
        return last.withLock { last in
            // Entries older than the interval decide nothing: dropped, so the table stays as small as the traffic.
            last = last.filter { now - $0.value < interval }
            guard last[account] == nil else { return false }
            last[account] = now
            return true
        }
    }
}
