import FoundationEssentials

/// `status`: the agent's view of every account, without loading any token.
extension TokenBroker {
    /// The agent's view of every account. The keyring is probed through ``CredentialStore/view()``: bounded, so a
    /// keyring that hangs shows as `error` instead of stalling `status`; asked twice per probe whatever the number
    /// of accounts (its state, then one search of the items' attributes); shared by concurrent `status` calls.
    public func status() async -> BrokerStatus {
        let keyring = await keyring.view()
        var list: [AccountStatus] = []
        for name in accountOrder {
            guard let state = accounts[name] else { continue }
            let key = SecretKey(state.config)
            var hasRefresh = keyring.stored.map { $0.contains(key) }
            if keyring.held[key] != nil { hasRefresh = true }
            let now = time.now()
            let cache = state.cache
            // A non-expiring token (TokenSet.nonExpiring) shows no expiry rather than one the agent made up.
            let remaining = cache.flatMap { $0.tokens.nonExpiring ? nil : $0.tokens.expiresAt - now }
            var account = AccountStatus(
                name: name, issuer: state.config.issuer.absoluteString, clientID: state.config.clientID,
                registeredRedirectURI: state.config.registeredRedirectURI, scopes: state.config.scopes,
                hasRefreshToken: hasRefresh,
                accessTokenExpiresAt: remaining.map { TokenBroker.wallClockInstant(time.wallClock(), plus: $0) },
                accessTokenExpiresIn: remaining, accessTokenDoesNotExpire: cache?.tokens.nonExpiring ?? false,
                lastRefresh: state.lastRefresh, lastError: state.refresh.lastError,
                loginPending: state.signIn.isPending, gitHosts: state.config.gitHosts,
                scopedTokens: scopedStatus(state), signInValidUntil: state.lifetime.watch.validUntil,
                signInEnded: state.lifetime.watch.hasEnded(at: time.wallClock()),
                keptInMemory: keyring.held[key] != nil,
                keyringMoveError: keyring.held[key]?.moveError,
                dpop: state.proofKey == nil ? (state.dpopRefused ? "refused" : nil)
                    : (cache?.tokens.tokenType == "Bearer" ? "refresh_token" : "access_token"))
            account.dpopKey = state.proofKey.map { $0.held != nil ? "tpm" : "software" }
            list.append(account)
        }
        return BrokerStatus(keyring: keyring.state, store: self.keyring.choice, keyringService: keyring.service,
                            accounts: list)
    }

    /// The account's scoped access tokens, ordered by scope set and resource.
    private func scopedStatus(_ state: AccountState) -> [ScopedTokenStatus] {
        let now = time.now()
        let wall = time.wallClock()
        return state.entries.filter { !$0.key.isDefault }.map { key, cached in
            let remaining = cached.tokens.expiresAt - now
            return ScopedTokenStatus(scopes: key.scopes, resource: key.resource,
                                     expiresAt: TokenBroker.wallClockInstant(wall, plus: remaining), expiresIn: remaining,
                                     doesNotExpire: cached.tokens.nonExpiring)
        }
    }
}
