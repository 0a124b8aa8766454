import FoundationEssentials

/// One account's refresh rules as a pure state machine over the injected clock: what a request for a token does
/// (serve the cache, join or start the single refresh, wait out a backoff, fail), what a refresh's failure leaves
/// behind, and which cached entries the proactive loop should refresh. ``TokenBroker`` executes the actions; this
/// type holds no task, touches no network or keyring, and is tested step by step on a manual clock
/// (RefreshMachineTests).
struct RefreshMachine: Sendable {
    typealias Instant = ContinuousClock.Instant

    /// The account's standing with its authorization server.
    enum State: Equatable, Sendable {
        /// No refresh has failed since the last success.
        case healthy
        /// `count` transient failures in a row, the last one refreshing `entry`. Two waits follow a failure: the
        /// proactive loop does not ask the server before `retryNotBefore` (the exponential backoff), and a caller
        /// that needs a token does not before `callersNotBefore` (``RefreshPolicy/demandRetry`` after the failure,
        /// or the server's `Retry-After`), so callers find a server that is back within that short interval
        /// instead of waiting out the backoff. Both are nil once the network came back (``networkCameBack()``).
        case failing(count: Int, retryNotBefore: Instant?, callersNotBefore: Instant?, entry: TokenCacheKey)
    }

    /// What one request for an access token does next.
    enum Action: Equatable, Sendable {
        /// Hand out the cached entry; with `refreshBehind`, start its refresh too without waiting (stale while
        /// revalidate: the token is inside its early-refresh margin).
        case serve(refreshBehind: Bool)
        /// Wait for the refresh of this entry that is already running.
        case join
        /// Start the entry's refresh and wait for it.
        case start
        /// The server may not be asked yet (it failed less than ``RefreshPolicy/demandRetry`` ago, or its
        /// `Retry-After` runs); the cached entry is still valid, so it is handed out.
        case serveDuringBackoff
        /// The server may not be asked yet and nothing cached is usable: a request made after `retryAfter` asks it
        /// again (the broker waits that out for the caller when it is no longer than ``RefreshPolicy/demandRetry``,
        /// and otherwise fails saying so).
        case waitOut(retryAfter: Duration)
    }

    /// What follows a refresh that failed, for the caller that waited for it.
    enum Recovery: Equatable, Sendable {
        /// The server or network is down and the cached entry is still valid: a token beats an error.
        case serveCached
        case fail
    }

    let policy: RefreshPolicy
    private(set) var state: State = .healthy
    /// The last failure of a refresh or sign-in, for `status`; cleared by a success.
    private(set) var lastError: RecordedError?

    init(policy: RefreshPolicy) { self.policy = policy }

    /// Transient failures in a row (0 when healthy).
    var failures: Int {
        if case .failing(let count, _, _, _) = state { return count }
        return 0
    }

    /// The earliest moment the proactive loop asks the server again, if a backoff is set.
    var retryNotBefore: Instant? {
        if case .failing(_, let notBefore, _, _) = state { return notBefore }
        return nil
    }

    /// The earliest moment a caller's request asks the server again, if a wait is set.
    var callersNotBefore: Instant? {
        if case .failing(_, _, let notBefore, _) = state { return notBefore }
        return nil
    }

    /// The entry whose refresh failed last (retried at once when the network comes back).
    var failedEntry: TokenCacheKey? {
        if case .failing(_, _, _, let entry) = state { return entry }
        return nil
    }

    /// The proactive loop leaves the account alone until its backoff ends.
    func isBackingOff(at now: Instant) -> Bool { retryNotBefore.map { now < $0 } ?? false }

    /// A caller's request may ask the server now: no failure within ``RefreshPolicy/demandRetry``, no `Retry-After`.
    func callersMayAsk(at now: Instant) -> Bool { callersNotBefore.map { now >= $0 } ?? true }

    /// The last failure was not transient (e.g. `invalid_client`, `invalid_scope`): retrying on a timer would only
    /// repeat it, so only a caller's request tries again; a success clears it.
    var needsAttention: Bool { lastError.map { !RefreshPolicy.isTransient($0.code) } ?? false }

    // MARK: Requests

    /// Whether a cached entry may be handed out without a refresh: every rule about it is here.
    func isServable(_ cached: CachedToken, now: Instant, minValid: Duration) -> Bool {
        !cached.stale && policy.isFresh(expiresAt: cached.tokens.expiresAt, lifetime: cached.tokens.lifetime, now: now,
                                        minValid: minValid)
    }

    /// During an outage a cached entry is served, even stale, as long as it is valid for the policy's minimum.
    func isUsableDuringOutage(_ cached: CachedToken, now: Instant) -> Bool {
        policy.isFresh(expiresAt: cached.tokens.expiresAt, lifetime: cached.tokens.lifetime, now: now, minValid: .zero)
    }

    /// When a cached entry should be refreshed ahead of its expiry.
    func refreshMoment(_ cached: CachedToken) -> Instant {
        policy.refreshAt(receivedAt: cached.tokens.receivedAt, lifetime: cached.tokens.lifetime, jitter: cached.jitter)
    }

    /// One request for an entry, given what is cached for it and whether its refresh is running. During a backoff a
    /// request asks the server as soon as callers may (``callersMayAsk(at:)``), not when the backoff ends: while
    /// callers ask, a server that is back is found within ``RefreshPolicy/demandRetry``, and single flight keeps it
    /// to one request at a time however many ask.
    func request(cached: CachedToken?, refreshing: Bool, now: Instant, minValid: Duration,
                 forceRefresh: Bool) -> Action {
        if !forceRefresh, let cached, isServable(cached, now: now, minValid: minValid) {
            let due = now >= refreshMoment(cached) && !refreshing && callersMayAsk(at: now)
            return .serve(refreshBehind: due)
        }
        if refreshing { return .join }
        if !forceRefresh, let notBefore = callersNotBefore, now < notBefore {
            if let cached, isUsableDuringOutage(cached, now: now) { return .serveDuringBackoff }
            return .waitOut(retryAfter: notBefore - now)
        }
        return .start
    }

    /// What the caller of a refresh that failed with `error` does, given what is cached for the entry now. (A
    /// needed sign-in is the caller's to start: `AgentOperations.token` does for `--interactive`.)
    func recover(from error: AuthError, cached: CachedToken?, now: Instant, forceRefresh: Bool) -> Recovery {
        if RefreshPolicy.isTransient(error.code), !forceRefresh, let cached, isUsableDuringOutage(cached, now: now) {
            return .serveCached
        }
        return .fail
    }

    /// Whether the proactive loop should refresh a cached entry now: the account was used within the policy's
    /// window, its last failure (if any) was transient, it is not backing off, the entry's refresh is not running,
    /// and the entry is stale or past its early-refresh moment.
    func isDue(_ cached: CachedToken, refreshing: Bool, lastUse: Instant?, now: Instant) -> Bool {
        guard isInUse(lastUse: lastUse, now: now), !isBackingOff(at: now), !refreshing else { return false }
        return cached.stale || now >= refreshMoment(cached)
    }

    /// Used recently enough to be kept fresh, and not waiting for a person.
    func isInUse(lastUse: Instant?, now: Instant) -> Bool {
        guard let lastUse, now - lastUse <= policy.recentUse else { return false }
        return !needsAttention
    }

    /// When the proactive loop should look at a cached entry again: its early-refresh moment, or the backoff's end.
    func nextCheck(_ cached: CachedToken) -> Instant {
        let at = refreshMoment(cached)
        if let notBefore = retryNotBefore, notBefore > at { return notBefore }
        return at
    }

    // MARK: Outcomes

    /// A refresh or sign-in succeeded, or the account signed out: no failure is left, the account is healthy.
    mutating func clearFailures() {
        state = .healthy
        lastError = nil
    }

    /// A refresh of `entry` failed. A transient failure starts (or lengthens) the proactive loop's backoff and
    /// returns its length, and callers may ask again after ``RefreshPolicy/demandRetry`` (or the server's
    /// `Retry-After`); any other failure leaves both as they were and returns nil.
    @discardableResult
    mutating func failed(_ error: AuthError, entry: TokenCacheKey, now: Instant, wallClock: Date,
                         jitter: @autoclosure () -> Double) -> Duration? {
        recordError(error, at: wallClock)
        guard RefreshPolicy.isTransient(error.code) else { return nil }
        let count = failures + 1
        let delay = policy.backoff(failures: count, retryAfter: error.retryAfter, jitter: jitter())
        let callersWait = min(policy.demandWait(retryAfter: error.retryAfter), delay)
        state = .failing(count: count, retryNotBefore: now + delay, callersNotBefore: now + callersWait, entry: entry)
        return delay
    }

    /// Remembers a failure for `status` without touching the backoff (a failed sign-in).
    mutating func recordError(_ error: AuthError, at wallClock: Date) {
        lastError = RecordedError(code: error.code, message: error.message, at: wallClock)
    }

    /// The network is back: the backoff ends now, the failure count stays (the next failure waits longer).
    mutating func networkCameBack() {
        if case .failing(let count, _, _, let entry) = state {
            state = .failing(count: count, retryNotBefore: nil, callersNotBefore: nil, entry: entry)
        }
    }
}
