import Logging

/// Resume from suspend and network-up: the system-bus watcher (AgentDBus's `SystemBusWatcher`) calls these when
/// logind or NetworkManager says so; ``WakePlan`` decides, this applies the plan.
extension TokenBroker {
    /// logind's `PrepareForSleep(true)`: remember when the system went to sleep, so "used recently" is measured up
    /// to that moment rather than across the whole suspend.
    public func systemSuspending() {
        suspendedAt = time.now()
        logger.info("the system is going to sleep")
    }

    /// logind's `PrepareForSleep(false)`: stale tokens are marked (no longer served) and those of accounts in use
    /// are refreshed. Returns when those refreshes have ended; callers that asked meanwhile joined them.
    @discardableResult
    public func systemResumed() async -> [TokenEntry] {
        let now = time.now()
        let plan = WakePlan.afterResume(wakeSnapshot(), suspendedAt: suspendedAt, now: now, policy: policy)
        suspendedAt = nil
        logger.info("the system resumed from suspend", metadata: [
            "stale": "\(plan.stale.count)", "refreshing": "\(plan.refreshNow.count)"])
        return await apply(plan, reason: "refresh after resume")
    }

    /// NetworkManager reports full connectivity: refreshes waiting out a network failure's backoff go now.
    @discardableResult
    public func networkUp() async -> [TokenEntry] {
        let plan = WakePlan.afterNetworkUp(wakeSnapshot(), now: time.now(), policy: policy)
        if !plan.backoffEnded.isEmpty {
            logger.info("the network is up: retrying at once", metadata: [
                "accounts": "\(plan.backoffEnded.joined(separator: ","))", "refreshing": "\(plan.refreshNow.count)"])
        }
        return await apply(plan, reason: "refresh after the network came back")
    }

    /// The one place that withdraws cached tokens from serving (until a refresh replaces them).
    func markStale(_ entries: [TokenEntry]) {
        for entry in entries {
            guard var cached = accounts[entry.account]?.cached(entry.key) else { continue }
            cached.stale = true
            accounts[entry.account]?.setCached(entry.key, cached)
        }
    }

    private func apply(_ plan: WakePlan, reason: String) async -> [TokenEntry] {
        markStale(plan.stale)
        for name in plan.backoffEnded { accounts[name]?.refresh.networkCameBack() }
        await refresh(plan.refreshNow, reason: reason)
        return plan.refreshNow
    }

    private func wakeSnapshot() -> [WakePlan.Account] {
        accountOrder.compactMap { name in
            guard let state = accounts[name] else { return nil }
            let entries = state.entries.map { key, cached in
                WakePlan.Entry(key: key, receivedAt: cached.tokens.receivedAt, refreshAt: state.refresh.refreshMoment(cached))
            }
            return WakePlan.Account(name: name, lastUsed: state.lastUsed, lastErrorCode: state.refresh.lastError?.code,
                                    retryNotBefore: state.refresh.retryNotBefore, failedEntry: state.refresh.failedEntry,
                                    entries: entries)
        }
    }
}
