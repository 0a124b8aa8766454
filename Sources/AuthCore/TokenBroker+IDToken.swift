#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Logging

/// ID token verification for sign-in and refresh, and the per-account cache of the provider's signing keys.
extension TokenBroker {
    /// How long a fetched JWKS is trusted before it is fetched again. An unknown `kid` refetches sooner, once.
    public static let signingKeysMaxAge: Duration = .seconds(3600)

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
                try await self.signingKeys(name, from: jwksURI, refetch: refetch)
            }
        } catch {
            logger.warning("rejected an ID token", metadata: ["account": "\(name)", "reason": "\(error.message)"])
            throw error
        }
    }

    /// The cached JWKS while it is young and from the same URL, or the result of a fetch of it already under way;
    /// otherwise (or with `refetch`, or when that fetch failed) a fresh one.
    func signingKeys(_ name: String, from url: URL, refetch: Bool) async throws(AuthError) -> JSONWebKeySet {
        if !refetch {
            if let keys = youngSigningKeys(name, from: url) { return keys }
            if let fetch = accounts[name]?.signingKeysFetch, fetch.source == url, let keys = try? await fetch.task.value {
                return keys
            }
        }
        return try await fetchSigningKeys(name, from: url)
    }

    /// Starts fetching the signing keys in the background unless they are cached and young or already on their way.
    /// A failure is not reported here: the ID token check then fetches again and reports its own.
    func prefetchSigningKeys(_ name: String, from url: URL) {
        guard youngSigningKeys(name, from: url) == nil, accounts[name]?.signingKeysFetch?.source != url else { return }
        let task = Task { () async throws -> JSONWebKeySet in
            defer { if self.accounts[name]?.signingKeysFetch?.source == url { self.accounts[name]?.signingKeysFetch = nil } }
            return try await self.fetchSigningKeys(name, from: url)
        }
        accounts[name]?.signingKeysFetch = SigningKeysFetch(source: url, task: task)
    }

    private func youngSigningKeys(_ name: String, from url: URL) -> JSONWebKeySet? {
        guard let cached = accounts[name]?.signingKeys, cached.source == url,
              time.now() - cached.fetchedAt < TokenBroker.signingKeysMaxAge else { return nil }
        return cached.keys
    }

    private func fetchSigningKeys(_ name: String, from url: URL) async throws(AuthError) -> JSONWebKeySet {
        let reply = try await http.get(url)
        guard reply.status == 200 else {
            let code: AuthError.Code = reply.status >= 500 || reply.status == 429 ? .serverError : .invalidMetadata
            throw AuthError(code, "the provider's signing keys at \(url.absoluteString) answered HTTP \(reply.status)")
        }
        let keys = try JSONWebKeySet.parse(reply.body)
        accounts[name]?.signingKeys = CachedSigningKeys(source: url, keys: keys, fetchedAt: time.now())
        logger.debug("fetched the provider's signing keys", metadata: ["account": "\(name)", "keys": "\(keys.count)"])
        return keys
    }
}
