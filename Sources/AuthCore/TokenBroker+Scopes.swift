#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// Access tokens for a subset of the account's scopes and/or an RFC 8707 resource. Each (scope set, resource) has
/// its own cache entry and single flight; all are refreshed with the account's one refresh token, one redemption at
/// a time, so a rotated refresh token is in the keyring before its access token is used and every other entry
/// refreshes with whatever is stored. Like the default entry, a scoped one is refreshed ahead of expiry when its
/// account was used recently (``TokenBroker/entriesDueForRefresh()``), and behind a caller inside its margin.
extension TokenBroker {
    func scopedAccessToken(_ name: String, _ key: TokenCacheKey, minValid: Duration, forceRefresh: Bool,
                           interactive: Bool) async throws(AuthError) -> AccessTokenGrant {
        let state = try self.state(name)
        let now = time.now()
        noteUse(name, now)
        if !forceRefresh, let cached = state.scoped[key], isServable(cached, now: now, minValid: minValid) {
            // Stale-while-revalidate, as for the default entry.
            if now >= refreshMoment(state, key, cached), state.scopedRefresh[key] == nil,
               state.retryNotBefore.map({ now >= $0 }) ?? true {
                Task { _ = try? await self.scopedRefreshOnce(name, key) }
            }
            return scopedGrant(name, key, cached)
        }
        if !forceRefresh, let notBefore = state.retryNotBefore, now < notBefore, state.scopedRefresh[key] == nil {
            throw backoffError(state, notBefore: notBefore, now: now)
        }
        let refreshed: CachedToken
        do throws(AuthError) {
            refreshed = try await scopedRefreshOnce(name, key)
        } catch let error where error.code == .loginRequired && interactive {
            let ticket = try await beginLogin(account: name)
            _ = try await awaitLogin(ticket)
            refreshed = try await scopedRefreshOnce(name, key)
        } catch let error where RefreshPolicy.isTransient(error.code) && !forceRefresh {
            if let cached = accounts[name]?.scoped[key],
               policy.isFresh(expiresAt: cached.tokens.expiresAt, lifetime: cached.tokens.lifetime,
                              now: time.now(), minValid: .zero) {
                return scopedGrant(name, key, cached)
            }
            throw error
        }
        try requireValidity(refreshed, minValid: minValid)
        return scopedGrant(name, key, refreshed)
    }

    /// Single flight per (account, scope set, resource).
    func scopedRefreshOnce(_ name: String, _ key: TokenCacheKey) async throws(AuthError) -> CachedToken {
        let task: Task<CachedToken, Error>
        if let running = accounts[name]?.scopedRefresh[key] {
            task = running
        } else {
            task = Task { try await self.performRefresh(name, entry: key) }
            accounts[name]?.scopedRefresh[key] = task
        }
        do {
            let result = try await task.value
            clearScopedRefresh(name, key, task)
            return result
        } catch {
            clearScopedRefresh(name, key, task)
            throw TokenBroker.authError(error)
        }
    }

    private func clearScopedRefresh(_ name: String, _ key: TokenCacheKey, _ task: Task<CachedToken, Error>) {
        if accounts[name]?.scopedRefresh[key] == task { accounts[name]?.scopedRefresh[key] = nil }
    }

    /// Caches a scoped token (never its refresh token) and clears the account's failure state.
    func cacheScoped(_ name: String, _ key: TokenCacheKey, _ tokens: TokenSet) -> CachedToken {
        var tokens = tokens
        tokens.refreshToken = nil
        let cached = CachedToken(tokens: tokens, jitter: random())
        accounts[name]?.scoped[key] = cached
        accounts[name]?.lastError = nil
        accounts[name]?.failures = 0
        accounts[name]?.retryNotBefore = nil
        accounts[name]?.failedEntry = nil
        proactiveBell.ring()
        return cached
    }

    private func scopedGrant(_ name: String, _ key: TokenCacheKey, _ cached: CachedToken) -> AccessTokenGrant {
        var result = grant(name, cached)
        if cached.tokens.scopes == nil, let scopes = key.scopes { result.scopes = scopes }
        return result
    }

    /// The account's scoped access tokens for `status`, ordered by scope set and resource.
    func scopedStatus(_ name: String) -> [ScopedTokenStatus] {
        let now = time.now()
        let wall = time.wallClock()
        return (accounts[name]?.scoped ?? [:]).sorted { $0.key.description < $1.key.description }.map { key, cached in
            let remaining = cached.tokens.expiresAt - now
            return ScopedTokenStatus(scopes: key.scopes, resource: key.resource,
                                     expiresAt: TokenBroker.wallClockInstant(wall, plus: remaining), expiresIn: remaining,
                                     doesNotExpire: cached.tokens.nonExpiring)
        }
    }

    // MARK: One redemption at a time

    /// Waits until no other refresh of the account is redeeming its refresh token.
    func acquireRedemption(_ name: String) async {
        guard accounts[name]?.redeeming == true else {
            accounts[name]?.redeeming = true
            return
        }
        await withCheckedContinuation { (waiter: CheckedContinuation<Void, Never>) in
            accounts[name]?.redeemWaiters.append(waiter)
        }
    }

    /// Hands the redemption to the next waiter (it stays taken), or frees it.
    func releaseRedemption(_ name: String) {
        if let waiters = accounts[name]?.redeemWaiters, !waiters.isEmpty {
            let next = accounts[name]!.redeemWaiters.removeFirst()
            next.resume()
        } else {
            accounts[name]?.redeeming = false
        }
    }
}
