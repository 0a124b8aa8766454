import Synchronization

/// How often confined callers (sandboxed apps, forwarded hosts, grants: `ClientIdentity.isConfined`) may make the
/// agent go to an account's token endpoint when the desktop did not ask: at most ``perInterval`` times per account per
/// ``interval``, for all of them together. Programs of the desktop are not limited (AgentOperations asks only for
/// confined callers). AgentOperations keeps two:
/// - forced refreshes (`force_refresh` while the cached token is still good): one a minute; beyond that a confined
///   caller is served the cached token, which is then at most a minute old (the one the last forced refresh got),
///   without an error;
/// - tokens of a scope or resource set not cached yet (each one a refresh, and with rotation a new refresh token):
///   four a minute; beyond that `agent_busy` with when to ask again.
///
/// Why: every such call is a token-endpoint request and, with rotation, a new refresh token written to the keyring.
/// An app looping on `force_refresh`, or asking for a new resource each time, would otherwise hammer the user's
/// authorization server (which may throttle or lock the client) and churn the keyring item. A caller whose token a
/// resource server refused wants a newer one: a token minted within the interval is that newer one, whoever asked.
public final class TokenEndpointLimit: Sendable {
    /// The interval both limits count in.
    public static let defaultInterval: Duration = .seconds(60)

    public let interval: Duration
    public let perInterval: Int
    private let time: any TimeSource
    /// When each account's honoured calls within the last interval were asked, oldest first.
    private let honoured = Mutex<[String: [ContinuousClock.Instant]]>([:])

    public init(interval: Duration = TokenEndpointLimit.defaultInterval, perInterval: Int = 1, time: any TimeSource) {
        self.interval = interval
        self.perInterval = max(1, perInterval)
        self.time = time
    }

    /// Whether a confined caller's call for `account` is honoured now; an honoured one is counted.
    public func admit(_ account: String) -> Bool {
        retryAfter(account) == nil
    }

    /// Nil when a confined caller's call for `account` is honoured now (and then it is counted); else how long until
    /// the next one would be.
    public func retryAfter(_ account: String) -> Duration? {
        let now = time.now()
        return honoured.withLock { honoured in
            // Calls older than the interval decide nothing: dropped, so the table stays as small as the traffic.
            for (name, times) in honoured {
                let recent = times.filter { now - $0 < interval }
                honoured[name] = recent.isEmpty ? nil : recent
            }
            let recent = honoured[account] ?? []
            guard recent.count < perInterval else { return recent[0] + interval - now }
            honoured[account] = recent + [now]
            return nil
        }
    }
}
