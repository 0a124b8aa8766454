import FoundationEssentials
import Logging
import Synchronization

/// Pushed authorization requests (RFC 9126): the authorization request's parameters go to the server in a POST
/// (with client authentication, and `dpop_jkt` in the body: RFC 9449 §10.1), and the browser gets only `client_id`
/// and the `request_uri` the server answered with. The parameters never travel through the browser's URL.
extension TokenBroker {
    /// What a push answered: the `request_uri`, how long it lives, and when it was made.
    struct PushedRequest: Sendable {
        var requestURI: String
        var expiresIn: Int
        var pushedAt: ContinuousClock.Instant

        func expired(at now: ContinuousClock.Instant) -> Bool { now - pushedAt >= .seconds(expiresIn) }
    }

    /// The URL a pending pushed sign-in sends its callers to, and the push it carries: the first push, then each one
    /// made again for a late joiner (``freshTicket(_:_:)``), so that the joiners after it are given that one while it
    /// lives rather than pushing their own. One per sign-in, in its ``RedirectStart``.
    final class CurrentPush: Sendable {
        private let current: Mutex<(url: URL, pushed: PushedRequest?)>

        init(url: URL, pushed: PushedRequest) { current = Mutex((url, pushed)) }

        var value: (url: URL, pushed: PushedRequest?) {
            get { current.withLock { $0 } }
            set { current.withLock { $0 = newValue } }
        }
    }

    /// Whether this sign-in pushes its request, by the account's `par` and the server's metadata; `par = true`
    /// without an endpoint is an error.
    func wantsPushedAuthorization(_ config: AccountConfig, _ metadata: ProviderMetadata) throws(AuthError) -> Bool {
        switch config.par {
        case .off:
            guard !metadata.requiresPushedAuthorization else {
                throw AuthError(.invalidConfig, "account '\(config.name)' has par = false, but its authorization server takes only pushed requests (require_pushed_authorization_requests)")
            }
            return false
        case .auto: return metadata.pushedAuthorizationEndpoint != nil
        case .required:
            guard metadata.pushedAuthorizationEndpoint != nil else {
                throw AuthError(.invalidConfig, "account '\(config.name)' has par = true, but its authorization server has no pushed_authorization_request_endpoint")
            }
            return true
        }
    }

    /// The browser's URL for `session` and `redirectURI`: pushed when the account and server say so. With `par = "auto"` and a server
    /// that does not require it, a push refused as not allowed for this client falls back to the plain request (said
    /// in the journal); every other failure is the sign-in's error, reported like a token-endpoint error.
    func authorizationURL(for session: LoginSession, redirectURI: String, _ config: AccountConfig,
                          _ metadata: ProviderMetadata) async throws(AuthError) -> (url: URL, pushed: PushedRequest?) {
        guard try wantsPushedAuthorization(config, metadata), let endpoint = metadata.pushedAuthorizationEndpoint else {
            return (session.authorizationURL(redirectURI: redirectURI), nil)
        }
        do throws(AuthError) {
            let pushed = try await push(session.parameters(redirectURI: redirectURI), config, metadata, to: endpoint)
            logger.debug("pushed the authorization request", metadata: [
                "account": "\(config.name)", "expires_in_s": "\(pushed.expiresIn)"])
            return (LoginSession.pushedAuthorizationURL(metadata.authorizationEndpoint, clientID: config.clientID,
                                                        requestURI: pushed.requestURI), pushed)
        } catch let error where config.par == .auto && !metadata.requiresPushedAuthorization
                                && (error.code == .invalidClient || error.code == .loginRequired) {
            logger.notice("the authorization server refused a pushed request for this client; using a plain one",
                          metadata: ["account": "\(config.name)", "error_code": "\(error.code.rawValue)"])
            return (session.authorizationURL(redirectURI: redirectURI), nil)
        }
    }

    /// The ticket for a caller that joins a pending sign-in: the sign-in's current pushed request, or, when its
    /// `request_uri` has expired, the same parameters pushed again (a new `request_uri`), so the URL the caller
    /// shows still works. The new push becomes the sign-in's current one, for the callers after this one.
    func freshTicket(_ start: LoginStart, _ config: AccountConfig) async throws(AuthError) -> LoginTicket {
        guard case .redirect(let redirect) = start, let current = redirect.pushed else { return start.ticket }
        var ticket = start.ticket
        var push = current.value
        if let pushed = push.pushed, pushed.expired(at: time.now()) {
            push = try await authorizationURL(for: redirect.session, redirectURI: redirect.listener.redirectURI, config,
                                             redirect.metadata)
            current.value = push
            logger.info("the pushed authorization request expired; pushed it again for a caller that joined the sign-in",
                        metadata: ["account": "\(config.name)"])
        }
        ticket.authorizationURL = push.url
        return ticket
    }

    /// RFC 9126 §2: one POST of the request's parameters; the answer is 201 with `request_uri` and `expires_in`.
    private func push(_ parameters: [(String, String)], _ config: AccountConfig, _ metadata: ProviderMetadata,
                      to endpoint: URL) async throws(AuthError) -> PushedRequest {
        var authentication: [(String, String)] = []
        let basic = clientAuthentication(config, metadata, into: &authentication)
        // `client_id` is among the request's parameters already; a secret sent in the body is added once.
        let fields = parameters + authentication.filter { $0.0 != "client_id" }
        let reply = try await http.postForm(endpoint, fields: fields, basicAuth: basic)
        guard (200..<300).contains(reply.status) else {
            throw TokenResponseParser.error(from: reply, endpoint: "pushed authorization request endpoint")
        }
        let object: [String: JSONValue]?
        do { object = try JSONValue.object(reply.body) } catch {
            throw error.authError(.invalidTokenResponse, "the pushed authorization response")
        }
        guard let requestURI = object?["request_uri"]?.string, !requestURI.isEmpty,
              let expiresIn = object?["expires_in"]?.number, expiresIn > 0 else {
            throw AuthError(.invalidTokenResponse,
                "the pushed authorization response (HTTP \(reply.status)) has no request_uri or expires_in")
        }
        return PushedRequest(requestURI: requestURI, expiresIn: Int(min(expiresIn, 3600)), pushedAt: time.now())
    }
}
