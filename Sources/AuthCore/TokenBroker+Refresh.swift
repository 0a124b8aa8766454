import FoundationEssentials
import Logging

/// One refresh of one entry: the refresh token from the keyring, the token endpoint, rotation saved before anything
/// else, a refreshed ID token checked against the first, the result cached; a failure recorded in the account's
/// ``RefreshMachine``; a refresh token the server refused forgotten, only if it is still the stored one.
extension TokenBroker {
    /// Redeems the refresh token for the default entry or, with `entry`, a scoped one: the work of one entry's single
    /// flight (``refreshOnce(_:_:)``), one redemption per account at a time (TokenBroker+Redemption.swift).
    ///
    /// A reload may reset or remove the account while this runs (``reconfigure(_:)``): one that came before the turn
    /// was taken sends this refresh to the settings now in force; one that comes later lets it finish (the server may
    /// rotate the refresh token, which is then stored all the same), but its results no longer reach the account's new
    /// state: the token goes to the callers that asked before the reload, and nowhere else.
    func performRefresh(_ name: String, entry: TokenCacheKey = .default) async throws(AuthError) -> CachedToken {
        let begun = try state(name)
        let config = begun.config
        let key = SecretKey(config)
        await acquireRedemption(key)
        guard accounts[name]?.epoch == begun.epoch else {
            releaseRedemption(key)
            return try await refreshOnce(name, entry)
        }
        defer { releaseRedemption(key) }
        let ours = { self.accounts[name]?.epoch == begun.epoch }
        do throws(AuthError) {
            // The stored form: the refresh token with its DPoP key, if the sign-in has one (StoredCredential).
            guard let stored = try await loadRefreshToken(key) else { throw AuthError.loginRequired(name) }
            let credential = try StoredCredential(stored: stored)
            guard let refreshToken = credential.refreshToken else {
                // Nothing to redeem: the stored access token is the credential (TokenSet.nonExpiring).
                guard case .longLivedAccessToken(let access) = credential.token else { throw AuthError.loginRequired(name) }
                var tokens = TokenSet(accessToken: access, lifetime: .seconds(TokenResponseParser.maximumLifetime),
                                      receivedAt: time.now())
                tokens.nonExpiring = true
                if ours() { await storeMovedDeadline(name, credential: stored, key: key) }
                return refreshed(name, entry, tokens, proofKey: nil, claims: nil, ours: ours())
            }
            // OIDC Core §12.2's reference: the sign-in's claims, kept with the credential, so a restart keeps them too.
            // An item written before they were has none; the first refreshed ID token since then becomes it (below).
            let signInClaims = credential.signInClaims ?? (ours() ? accounts[name]?.idClaims : nil)
            let metadata = try await metadata(for: name)
            var fields = [("grant_type", "refresh_token"), ("refresh_token", refreshToken.reveal())]
                + entry.refreshFields(configuredScopes: config.scopes)
            let basic = clientAuthentication(config, metadata, into: &fields)
            let sentAt = time.now()
            logger.debug("refreshing", metadata: ["account": "\(name)"])
            let reply = try await postToTokenEndpoint(metadata, fields: fields, basicAuth: basic, proofKey: credential.proofKey)
            var tokens: TokenSet
            do throws(AuthError) {
                tokens = try TokenResponseParser.parse(reply, receivedAt: sentAt, proofSent: credential.proofKey != nil,
                                                       refreshing: true)
            } catch let error where error.code == .loginRequired {
                try await forgetDeadRefreshToken(name, key: key, sent: stored)
                throw AuthError(.loginRequired, "\(error.message); run `authctl login \(name)`")
            }
            if ours() { noteRefresh(name, tokens) }
            // Rotation: the new refresh token (with the sign-in's key) is stored before any access token is used. A
            // keyring that refuses it leaves it held in memory (CredentialStore), where the next refresh finds it.
            var kept = stored
            if let rotated = tokens.refreshToken, rotated != refreshToken {
                let next = StoredCredential.refreshToken(rotated, proofKey: credential.proofKey, signInClaims: signInClaims)
                if case .held(let refusal) = try await storeRefreshToken(next.stored, for: key, as: .rotation) {
                    throw refusal
                }
                kept = next.stored
            } else if ours() {
                await storeMovedDeadline(name, credential: stored, key: key)
            }
            // OIDC Core §12.2: a refreshed ID token is verified like the first and must name the same user and client.
            // Checked after the rotated refresh token is safe, so a bad ID token costs this access token, not the sign-in.
            // The reference stays the sign-in's: a refresh never replaces it.
            var claims = signInClaims
            if let idToken = tokens.idToken {
                if let verified = try await verifiedIDToken(idToken, account: name, metadata: metadata, nonce: nil,
                                                            original: signInClaims) {
                    claims = signInClaims ?? verified
                    await keepSignInClaims(name, signInClaims ?? verified, in: kept, key: key)
                } else {
                    tokens.idToken = nil
                }
            }
            logger.info("refreshed access token", metadata: ["account": "\(name)", "entry": "\(entry)",
                                                             "expires_in_s": "\(tokens.lifetime.components.seconds)"])
            return refreshed(name, entry, tokens, proofKey: credential.proofKey, claims: claims, ours: ours())
        } catch {
            guard ours() else { throw error }
            if error.code == .loginRequired { publish(.signInRequired(name)) }
            if let delay = accounts[name]?.refresh.failed(error, entry: entry, now: time.now(), wallClock: time.wallClock(),
                                                           jitter: random()) {
                logger.notice("refresh failed; backing off", metadata: [
                    "account": "\(name)", "error_code": "\(error.code.rawValue)",
                    "failures": "\(accounts[name]?.refresh.failures ?? 0)", "retry_in_s": "\(delay.components.seconds)"])
            }
            throw error
        }
    }

    /// A refresh's result: cached, and the sign-in's key and claims with it (the key the token is bound to changes
    /// with the token, with no suspension between), when the account's state is still the one the refresh began for.
    private func refreshed(_ name: String, _ entry: TokenCacheKey, _ tokens: TokenSet, proofKey: DPoPKey?,
                           claims: IDTokenClaims?, ours: Bool) -> CachedToken {
        var tokens = tokens
        if ours {
            accounts[name]?.proofKey = proofKey
            if let claims { accounts[name]?.idClaims = claims }
            if entry.isDefault, tokens.idToken == nil { tokens.idToken = accounts[name]?.cache?.tokens.idToken }
        }
        return cacheTokens(name, entry, tokens, keep: ours)
    }

    /// The stored refresh token, or nil when there truly is none. A locked collection hides its items (a lookup
    /// returns nothing, without an error), so "nothing" is double-checked against the keyring's state: a locked or
    /// absent keyring is reported as such, never as "not signed in" (SECURITY.md 19). The item's dates are taken
    /// only while the account's are not known in this run (``credentialFromKeyring(_:account:)``).
    func loadRefreshToken(_ key: SecretKey) async throws(AuthError) -> Secret? {
        try await keyring.load(key).map { credentialFromKeyring($0, account: key.account) }
    }

    /// Keeps `claims` with the credential `stored` (the secret the refresh left in the keyring) if it has none: an
    /// item written before they were kept, so the next refreshed ID token is compared with them after a restart too.
    /// Written only while the item still holds `stored`; a failure costs that comparison, never the sign-in.
    private func keepSignInClaims(_ name: String, _ claims: IDTokenClaims, in stored: Secret, key: SecretKey) async {
        guard let credential = try? StoredCredential(stored: stored), credential.signInClaims == nil else { return }
        let kept = StoredCredential(credential.token, proofKey: credential.proofKey, signInClaims: claims)
        do throws(AuthError) {
            guard try await keyring.item(key)?.secret == stored else { return }
            try await storeRefreshToken(kept.stored, for: key)
        } catch {
            logger.notice("cannot keep the ID token's claims with the sign-in in the keyring", metadata: [
                "account": "\(name)", "error_code": "\(error.code.rawValue)"])
        }
    }

    /// `invalid_grant`: delete only the refresh token that was sent, and only if it is still the stored one.
    private func forgetDeadRefreshToken(_ name: String, key: SecretKey, sent: Secret) async throws(AuthError) {
        accounts[name]?.cache = nil
        accounts[name]?.scoped = [:]
        if try await keyring.delete(key, ifStill: sent) {
            forgetDeadline(name)
            logger.notice("refresh token rejected by the server; deleted it", metadata: ["account": "\(name)"])
            publish(.accountChanged(name))
        }
    }
}
