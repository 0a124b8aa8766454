import Logging

/// Proactive refresh: recently used accounts' tokens (default and scoped) are refreshed ahead of expiry, so
/// steady-state callers get cached tokens. Which entries are due is decided over the broker's state and the injected
/// clock (``RefreshPolicy``), so it is tested on a manual clock without sleeping.
extension TokenBroker {
    /// Accounts with a token that should be refreshed now (see ``entriesDueForRefresh()``), in configuration order.
    public func accountsDueForRefresh() -> [String] {
        let due = Set(entriesDueForRefresh().map(\.account))
        return accountOrder.filter(due.contains)
    }

    /// Cached tokens (default and scoped) that should be refreshed now: the account was used recently, the token is
    /// past its early-refresh moment or marked stale, it is not already refreshing, the account is not in backoff
    /// and its last failure (if any) was transient.
    /// Pure over the broker's state and the clock, so it is tested without sleeping.
    public func entriesDueForRefresh() -> [TokenEntry] {
        let now = time.now()
        var due: [TokenEntry] = []
        for name in accountOrder {
            guard let state = accounts[name], let used = state.lastUse, now - used <= policy.recentUse,
                  !needsAttention(state) else { continue }
            if let notBefore = state.retryNotBefore, now < notBefore { continue }
            if let cached = state.cache, state.refresh == nil,
               cached.stale || now >= refreshMoment(state, .default, cached) {
                due.append(TokenEntry(account: name, key: .default))
            }
            for (key, cached) in state.scoped.sorted(by: { $0.key.description < $1.key.description })
            where state.scopedRefresh[key] == nil && (cached.stale || now >= refreshMoment(state, key, cached)) {
                due.append(TokenEntry(account: name, key: key))
            }
        }
        return due
    }

    /// The last failure was not transient (e.g. `invalid_client`, `invalid_scope`): retrying on a timer would only
    /// repeat it (with no backoff, every 100 ms), so only a caller's request tries again; a success clears it.
    private func needsAttention(_ state: AccountState) -> Bool {
        guard let code = state.lastError?.code else { return false }
        return !RefreshPolicy.isTransient(code)
    }

    /// Still stale, past its early-refresh moment, or the refresh that failed last.
    private func stillWantsRefresh(_ entry: TokenEntry) -> Bool {
        guard let state = accounts[entry.account] else { return false }
        if state.failedEntry == entry.key { return true }
        guard let cached = entry.key.isDefault ? state.cache : state.scoped[entry.key] else { return false }
        return cached.stale || time.now() >= refreshMoment(state, entry.key, cached)
    }

    /// When a cached entry should be refreshed ahead of its expiry.
    func refreshMoment(_ state: AccountState, _ key: TokenCacheKey, _ cached: CachedToken) -> ContinuousClock.Instant {
        policy.refreshAt(receivedAt: cached.tokens.receivedAt, lifetime: cached.tokens.lifetime,
                         jitter: key.isDefault ? state.refreshJitter : cached.jitter)
    }

    /// How long until an account may next need a proactive refresh (at most `ceiling`).
    public func nextProactiveCheck(ceiling: Duration = .seconds(60)) -> Duration {
        let now = time.now()
        var next = ceiling
        for state in accounts.values {
            guard let used = state.lastUse, now - used <= policy.recentUse, !needsAttention(state) else { continue }
            let entries = (state.cache.map { [(TokenCacheKey.default, $0)] } ?? []) + state.scoped.map { ($0.key, $0.value) }
            for (key, cached) in entries {
                var at = refreshMoment(state, key, cached)
                if let notBefore = state.retryNotBefore, notBefore > at { at = notBefore }
                next = min(next, max(at - now, .milliseconds(100)))
            }
        }
        return next
    }

    /// Refreshes every due entry (each through its single-flight path). Returns the names of the accounts refreshed.
    @discardableResult
    public func refreshDueAccounts() async -> [String] {
        let due = entriesDueForRefresh()
        await refresh(due, reason: "proactive refresh")
        return accountOrder.filter { name in due.contains { $0.account == name } }
    }

    /// Refreshes `entries` one after another through their single flights; failures are logged (and recorded by
    /// the refresh itself), never thrown: nobody waits for these but the callers that join them. An entry that a
    /// caller's own refresh made fresh in the meantime is skipped.
    func refresh(_ entries: [TokenEntry], reason: String) async {
        for entry in entries where stillWantsRefresh(entry) {
            do throws(AuthError) {
                if entry.key.isDefault {
                    _ = try await refreshOnce(entry.account)
                } else {
                    _ = try await scopedRefreshOnce(entry.account, entry.key)
                }
            } catch {
                logger.notice("\(reason) failed", metadata: ["account": "\(entry.account)", "entry": "\(entry.key)",
                                                           "error_code": "\(error.code.rawValue)"])
            }
        }
    }

    /// Records a caller's use; an account that was idle wakes the loop, whose sleep did not count it.
    func noteUse(_ name: String, _ now: ContinuousClock.Instant) {
        let wasIdle = accounts[name]?.lastUsed.map { now - $0 > policy.recentUse } ?? true
        accounts[name]?.lastUsed = now
        if wasIdle { proactiveBell.ring() }
    }

    /// Runs until cancelled: keeps recently used accounts' tokens fresh ahead of expiry.
    public func runProactiveRefresh() async {
        while !Task.isCancelled {
            let wait = nextProactiveCheck()
            guard await proactiveBell.sleep(for: wait, on: time) else { return }
            await refreshDueAccounts()
        }
    }
}
