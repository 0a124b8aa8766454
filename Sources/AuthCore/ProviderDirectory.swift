import FoundationEssentials
import Logging
import Synchronization

/// What the broker knows about each account's authorization server: its metadata (OIDC discovery or RFC 8414, then
/// the account's own settings on top) and its signing keys (JWKS), each trusted for an hour. A signing-key fetch
/// started while a person signs in is joined by the ID-token check rather than repeated; an unknown `kid` makes the
/// check ask for a fresh set (`refetch`).
///
/// An entry belongs to the exact account configuration it was made for: after a reload that changed the account,
/// the next use fetches again. Its functions run on the caller's executor (`nonisolated(nonsending)`), so the broker
/// reads a known answer without leaving its actor; only a fetch suspends it.
final class ProviderDirectory: Sendable {
    static let metadataMaxAge: Duration = .seconds(3600)
    /// How long a fetched JWKS is trusted before it is fetched again. An unknown `kid` refetches sooner, once.
    static let signingKeysMaxAge: Duration = .seconds(3600)

    private struct Known {
        var metadata: (config: AccountConfig, value: ProviderMetadata, fetchedAt: ContinuousClock.Instant)?
        var keys: (source: URL, keys: JSONWebKeySet, fetchedAt: ContinuousClock.Instant)?
        var keysFetch: (source: URL, task: Task<JSONWebKeySet, any Error>)?
    }

    private let known = Mutex<[String: Known]>([:])
    private let http: any HTTPTransport
    private let time: any TimeSource
    private let logger: Logger

    init(http: any HTTPTransport, time: any TimeSource, logger: Logger) {
        self.http = http
        self.time = time
        self.logger = logger
    }

    // MARK: Metadata

    /// The account's metadata: the known one while it is younger than ``metadataMaxAge``, else fetched.
    nonisolated(nonsending) func metadata(for config: AccountConfig) async throws(AuthError) -> ProviderMetadata {
        let now = time.now()
        if let known = known.withLock({ $0[config.name]?.metadata }), known.config == config,
           now - known.fetchedAt < ProviderDirectory.metadataMaxAge {
            return known.value
        }
        let resolved = try await resolve(config, using: http)
        let fetchedAt = time.now()
        known.withLock { $0[config.name, default: Known()].metadata = (config, resolved, fetchedAt) }
        return resolved
    }

    /// Discovery for whatever the account does not configure itself, then the account's overrides on top; never
    /// cached. `http` is the broker's transport, or a recording wrapper around it (`authctl doctor`).
    nonisolated(nonsending) func resolve(_ config: AccountConfig, using http: any HTTPTransport) async throws(AuthError) -> ProviderMetadata {
        var discovered: ProviderMetadata?
        if config.authorizationEndpoint == nil || config.tokenEndpoint == nil || config.revocationEndpoint == nil
            || (config.wantsOpenID && config.jwksURI == nil) {
            discovered = try await discover(config, using: http)
        }
        return try ProviderMetadata.resolve(discovered, for: config)
    }

    /// OIDC discovery, then RFC 8414. With both endpoints configured, a missing document is not an error.
    nonisolated(nonsending) private func discover(_ config: AccountConfig, using http: any HTTPTransport) async throws(AuthError) -> ProviderMetadata? {
        let explicit = config.authorizationEndpoint != nil && config.tokenEndpoint != nil
        var lastStatus = 0
        var found: ProviderMetadata?
        for url in ProviderMetadata.discoveryURLs(for: config.issuer) {
            let reply: HTTPReply
            do throws(AuthError) {
                reply = try await http.get(url)
            } catch {
                if explicit || found != nil { return found }
                throw error
            }
            if reply.status == 200 {
                if var first = found {
                    // Some servers (Django OAuth Toolkit, others) list revocation only in the RFC 8414 document.
                    first.revocationEndpoint = (try? ProviderMetadata.parse(reply.body, expectedIssuer: config.issuer))?.revocationEndpoint
                    return first
                }
                let metadata: ProviderMetadata
                do throws(AuthError) {
                    metadata = try ProviderMetadata.parse(reply.body, expectedIssuer: config.issuer)
                } catch {
                    // With both endpoints configured, discovery only fills gaps; a document we cannot trust is skipped.
                    if explicit {
                        logger.notice("ignoring the discovery document", metadata: ["account": "\(config.name)", "reason": "\(error.message)"])
                        return nil
                    }
                    throw error
                }
                if metadata.revocationEndpoint != nil { return metadata }
                found = metadata
                continue
            }
            if found != nil { return found }
            lastStatus = reply.status
            if reply.status >= 500 || reply.status == 429, !explicit {
                throw AuthError(.serverError, "discovery at \(url.absoluteString) answered HTTP \(reply.status)")
            }
        }
        if explicit || found != nil { return found }
        throw AuthError(.invalidMetadata,
            "no discovery document at \(config.issuer.absoluteString) (HTTP \(lastStatus)); check 'issuer' or configure the endpoints")
    }

    // MARK: Signing keys

    /// The known JWKS while it is young and from the same URL, or the result of a fetch of it already under way;
    /// otherwise (or with `refetch`, or when that fetch failed) a fresh one.
    nonisolated(nonsending) func signingKeys(account: String, from url: URL, refetch: Bool) async throws(AuthError) -> JSONWebKeySet {
        if !refetch {
            if let keys = youngKeys(account, from: url) { return keys }
            if let fetch = known.withLock({ $0[account]?.keysFetch }), fetch.source == url, let keys = try? await fetch.task.value {
                return keys
            }
        }
        return try await fetchKeys(account, from: url)
    }

    /// Starts fetching the signing keys in the background unless they are known and young or already on their way.
    /// A failure is not reported here: the ID-token check then fetches again and reports its own.
    func prefetchSigningKeys(account: String, from url: URL) {
        guard youngKeys(account, from: url) == nil else { return }
        known.withLock { known in
            guard known[account]?.keysFetch?.source != url else { return }
            let task = Task { () async throws -> JSONWebKeySet in
                defer {
                    self.known.withLock { if $0[account]?.keysFetch?.source == url { $0[account]?.keysFetch = nil } }
                }
                return try await self.fetchKeys(account, from: url)
            }
            known[account, default: Known()].keysFetch = (url, task)
        }
    }

    /// Forgets what is known about a removed account.
    func forget(_ account: String) {
        _ = known.withLock { $0.removeValue(forKey: account) }
    }

    private func youngKeys(_ account: String, from url: URL) -> JSONWebKeySet? {
        let now = time.now()
        guard let known = known.withLock({ $0[account]?.keys }), known.source == url,
              now - known.fetchedAt < ProviderDirectory.signingKeysMaxAge else { return nil }
        return known.keys
    }

    nonisolated(nonsending) private func fetchKeys(_ account: String, from url: URL) async throws(AuthError) -> JSONWebKeySet {
        let reply = try await http.get(url)
        guard reply.status == 200 else {
            let code: AuthError.Code = reply.status >= 500 || reply.status == 429 ? .serverError : .invalidMetadata
            throw AuthError(code, "the provider's signing keys at \(url.absoluteString) answered HTTP \(reply.status)")
        }
        let keys = try JSONWebKeySet.parse(reply.body)
        let fetchedAt = time.now()
        known.withLock { $0[account, default: Known()].keys = (url, keys, fetchedAt) }
        logger.debug("fetched the provider's signing keys", metadata: ["account": "\(account)", "keys": "\(keys.count)"])
        return keys
    }
}
