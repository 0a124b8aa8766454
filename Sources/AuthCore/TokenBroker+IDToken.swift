import FoundationEssentials
import Logging

/// ID token verification for sign-in and refresh, with the provider's signing keys from ``ProviderDirectory``.
extension TokenBroker {
    /// Verifies an ID token that came from the token endpoint and returns its claims, or nil when the token was
    /// dropped unread.
    ///
    /// The rule when the provider publishes no `jwks_uri` (and the account sets none): an account that asked for
    /// `openid` fails the sign-in, because an ID token whose signature cannot be checked is never used. OIDC Core
    /// §3.1.3.7 item 6 would allow trusting TLS to the token endpoint instead, but every provider that issues ID
    /// tokens publishes its keys (discovery requires `jwks_uri`), so the stricter rule costs nothing real. An account
    /// that did not ask for `openid` and gets an ID token anyway has it dropped, with a warning.
    func verifiedIDToken(_ token: Secret, account name: String, metadata: ProviderMetadata, nonce: Secret?,
                         original: IDTokenClaims?) async throws(AuthError) -> IDTokenClaims? {
        let config = try state(name).config
        guard let jwksURI = metadata.jwksURI else {
            if config.wantsOpenID {
                throw AuthError(.invalidIDToken,
                    "the provider publishes no jwks_uri, so the ID token's signature cannot be checked; set jwks_uri for account '\(name)'")
            }
            logger.warning("dropped an ID token nobody asked for: the provider publishes no keys to check it with",
                           metadata: ["account": "\(name)"])
            return nil
        }
        let verifier = IDTokenVerifier(issuer: metadata.issuer, clientID: config.clientID)
        do throws(AuthError) {
            return try await verifier.verify(token, nonce: nonce, original: original, now: time.wallClock()) {
                (refetch: Bool) async throws(AuthError) -> JSONWebKeySet in
                try await self.providers.signingKeys(account: name, from: jwksURI, refetch: refetch)
            }
        } catch {
            logger.warning("rejected an ID token", metadata: ["account": "\(name)", "reason": "\(error.message)"])
            throw error
        }
    }
}
