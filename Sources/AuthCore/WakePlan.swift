/// What to do with cached access tokens when the system resumes from suspend or the network comes back. Pure: built
/// from a snapshot of the broker's state and the clock, so every rule is tested step by step without sleeping.
///
/// Expiry already runs on a clock that counts suspended time (`ContinuousClock`), so an expired token is never served
/// whatever happens here. What a wake-up changes is *freshness*: the proactive refresh timer may have slept through
/// the moment it should have fired, and the network may be new.
///
/// **Stale after resume** means, for one cached token, either
/// - it is past its early-refresh moment (``RefreshPolicy/refreshAt(receivedAt:lifetime:jitter:)``: inside the
///   margin, or expired), whatever its account; or
/// - it was issued before the suspend and its account was *in use*: a caller asked for one of its tokens within
///   ``RefreshPolicy/recentUse`` before the system went to sleep (before the resume, when the suspend itself was
///   not seen). Measuring from the start of the suspend means a night's sleep does not make the morning's account
///   look idle; a token a caller already got refreshed after the resume is not refreshed again.
///
/// A stale token is not served while it can be refreshed: a caller waits for (joins) the refresh instead of getting a
/// token that is about to expire or was issued before a long absence. Only if that refresh fails for a transient
/// reason is the stale token served, while it is still valid (the outage rule of ``TokenBroker``).
/// Stale tokens of accounts in use are refreshed at once; the others on their next request.
///
/// **Network up** (NetworkManager reports full connectivity): an account backing off after a *network* failure
/// (``RefreshPolicy/isNetworkFailure(_:)``) ends its backoff, and the refresh that failed is retried at once if the
/// account is in use. Backoff after a server's own answer (5xx, 429 with `Retry-After`) is kept: the network coming
/// back says nothing about the server. A resume ends network backoff the same way.
public struct WakePlan: Sendable, Equatable {
    /// One account as the plan sees it.
    public struct Account: Sendable {
        public var name: String
        public var lastUsed: ContinuousClock.Instant?
        public var lastErrorCode: AuthError.Code?
        public var retryNotBefore: ContinuousClock.Instant?
        /// The entry whose refresh failed last, if any.
        public var failedEntry: TokenCacheKey?
        /// Cached tokens: key, when each was received, and when it should be refreshed ahead of expiry.
        public var entries: [Entry]

        public init(name: String, lastUsed: ContinuousClock.Instant?, lastErrorCode: AuthError.Code?,
                    retryNotBefore: ContinuousClock.Instant?, failedEntry: TokenCacheKey?,
                    entries: [Entry]) {
            self.name = name
            self.lastUsed = lastUsed
            self.lastErrorCode = lastErrorCode
            self.retryNotBefore = retryNotBefore
            self.failedEntry = failedEntry
            self.entries = entries
        }
    }

    /// One cached token as the plan sees it.
    public struct Entry: Sendable {
        public var key: TokenCacheKey
        public var receivedAt: ContinuousClock.Instant
        public var refreshAt: ContinuousClock.Instant

        public init(key: TokenCacheKey, receivedAt: ContinuousClock.Instant, refreshAt: ContinuousClock.Instant) {
            self.key = key
            self.receivedAt = receivedAt
            self.refreshAt = refreshAt
        }
    }

    /// Tokens that must not be served until refreshed (or until a refresh fails transiently).
    public var stale: [TokenEntry] = []
    /// Accounts whose backoff ends now.
    public var backoffEnded: [String] = []
    /// Refreshes to start at once, in order.
    public var refreshNow: [TokenEntry] = []

    public init(stale: [TokenEntry] = [], backoffEnded: [String] = [], refreshNow: [TokenEntry] = []) {
        self.stale = stale
        self.backoffEnded = backoffEnded
        self.refreshNow = refreshNow
    }

    /// The plan when the system has resumed at `now`; `suspendedAt` is when it went to sleep, if that was seen.
    public static func afterResume(_ accounts: [Account], suspendedAt: ContinuousClock.Instant?,
                                   now: ContinuousClock.Instant, policy: RefreshPolicy) -> WakePlan {
        let reference = suspendedAt.map { min($0, now) } ?? now
        var plan = WakePlan()
        for account in accounts {
            let inUse = account.lastUsed.map { reference - $0 <= policy.recentUse } ?? false
            let networkBackoff = endsOnNetworkUp(account, now: now)
            if networkBackoff { plan.backoffEnded.append(account.name) }
            let serverBackoff = !networkBackoff && (account.retryNotBefore.map { now < $0 } ?? false)
            for entry in account.entries where (inUse && entry.receivedAt <= reference) || now >= entry.refreshAt {
                let token = TokenEntry(account: account.name, key: entry.key)
                plan.stale.append(token)
                // A server that asked us to wait (5xx, Retry-After) is not asked again before then.
                if inUse && !serverBackoff { plan.refreshNow.append(token) }
            }
        }
        return plan
    }

    /// The plan when the network has come back at `now`.
    public static func afterNetworkUp(_ accounts: [Account], now: ContinuousClock.Instant,
                                      policy: RefreshPolicy) -> WakePlan {
        var plan = WakePlan()
        for account in accounts where endsOnNetworkUp(account, now: now) {
            plan.backoffEnded.append(account.name)
            let inUse = account.lastUsed.map { now - $0 <= policy.recentUse } ?? false
            if inUse, let failed = account.failedEntry { plan.refreshNow.append(TokenEntry(account: account.name, key: failed)) }
        }
        return plan
    }

    /// Backing off (the wait has not ended) after a failure of the network path.
    static func endsOnNetworkUp(_ account: Account, now: ContinuousClock.Instant) -> Bool {
        guard let notBefore = account.retryNotBefore, now < notBefore, let code = account.lastErrorCode else { return false }
        return RefreshPolicy.isNetworkFailure(code)
    }
}
