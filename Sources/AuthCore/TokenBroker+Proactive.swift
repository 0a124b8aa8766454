import Logging

/// Proactive refresh: recently used accounts' tokens (default and scoped) are refreshed ahead of expiry, so
/// steady-state callers get cached tokens. Which entries are due is decided over the broker's state and the injected
/// clock (``RefreshPolicy``), so it is tested on a manual clock without sleeping.
extension TokenBroker {
    /// Cached tokens (default and scoped) that should be refreshed now: the account was used recently, the token is
    /// past its early-refresh moment or marked stale, it is not already refreshing, the account is not in backoff
    /// and its last failure (if any) was transient.
    /// Pure over the broker's state and the clock, so it is tested without sleeping.
    public func entriesDueForRefresh() -> [TokenEntry] {
        let now = time.now()
        return accountOrder.flatMap { name -> [TokenEntry] in
            guard let state = accounts[name] else { return [] }
            return state.entries.filter { key, cached in
                state.refresh.isDue(cached, refreshing: state.refreshes[key] != nil, lastUse: state.lastUsed, now: now)
            }.map { TokenEntry(account: name, key: $0.key) }
        }
    }

    /// Still stale, past its early-refresh moment, or the refresh that failed last.
    private func stillWantsRefresh(_ entry: TokenEntry) -> Bool {
        guard let state = accounts[entry.account] else { return false }
        if state.refresh.failedEntry == entry.key { return true }
        guard let cached = state.cached(entry.key) else { return false }
        return cached.stale || time.now() >= state.refresh.refreshMoment(cached)
    }

    /// How long until an account may next need a proactive refresh: the earliest early-refresh moment (or end of a
    /// backoff) of the accounts in use, at most `ceiling`. Nothing else makes an entry due without ringing
    /// ``proactiveBell`` (a use after an idle hour, new tokens, a new configuration), so the loop sleeps until then;
    /// the ceiling is a safety net, not a poll: each round re-maps the code the idle hook gave back.
    public func nextProactiveCheck(ceiling: Duration = .seconds(3600)) -> Duration {
        let now = time.now()
        var next = ceiling
        for state in accounts.values where state.refresh.isInUse(lastUse: state.lastUsed, now: now) {
            for (_, cached) in state.entries {
                next = min(next, max(state.refresh.nextCheck(cached) - now, .milliseconds(100)))
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
                _ = try await refreshOnce(entry.account, entry.key)
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
    /// `afterRound` runs after each round, whether it refreshed anything or not (the agent then hands back the
    /// memory the round mapped, as it does after a client). Rounds run when something falls due
    /// (``nextProactiveCheck(ceiling:)``), not on a timer.
    public func runProactiveRefresh(afterRound: @Sendable () -> Void = {}) async {
        while !Task.isCancelled {
            let wait = nextProactiveCheck()
            guard await proactiveBell.sleep(for: wait, on: time) else { return }
            await refreshDueAccounts()
            afterRound()
        }
    }
}
