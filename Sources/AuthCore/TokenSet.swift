import FoundationEssentials

/// A successful token response, validated. Expiry is kept on the injected monotonic clock (counts suspend).
public struct TokenSet: Sendable {
    public var accessToken: Secret
    public var tokenType: String
    public var refreshToken: Secret?
    public var idToken: Secret?
    public var scopes: [String]?
    public var lifetime: Duration
    /// The server gave neither `expires_in` nor a refresh token (a GitHub OAuth app): the access token is the
    /// long-lived credential, kept in the keyring like a refresh token (``StoredCredential``) and never given an
    /// expiry of the agent's invention (``lifetime`` is then ``TokenResponseParser/maximumLifetime``, only so the
    /// cache never thinks it stale).
    public var nonExpiring = false
    /// `refresh_token_expires_in` (GitHub Apps, some others): how long the refresh token, that is the sign-in, lives.
    /// ``SignInDeadline`` turns it into an absolute "valid until".
    public var refreshTokenLifetime: Int?
    public var receivedAt: ContinuousClock.Instant
    public var expiresAt: ContinuousClock.Instant { receivedAt + lifetime }

    public init(accessToken: Secret, tokenType: String = "Bearer", refreshToken: Secret? = nil, idToken: Secret? = nil,
                scopes: [String]? = nil, lifetime: Duration, receivedAt: ContinuousClock.Instant) {
        self.accessToken = accessToken
        self.tokenType = tokenType
        self.refreshToken = refreshToken
        self.idToken = idToken
        self.scopes = scopes
        self.lifetime = lifetime
        self.receivedAt = receivedAt
    }
}

/// A raw HTTP reply as the transport saw it; parsing lives here so it is tested without a network.
public struct HTTPReply: Sendable {
    public var status: Int
    public var body: [UInt8]
    public var retryAfter: String?
    /// The `Date` header: the server's clock, for `authctl doctor`'s clock check.
    public var date: String?
    /// The body was larger than the transport's cap and was not read (``body`` is empty).
    public var bodyTooLarge: Bool
    /// The `DPoP-Nonce` header (RFC 9449 §8): the nonce the server wants in the next proof.
    public var dpopNonce: String?
    /// ``dpopNonce`` when it names a nonce; nil when the header is absent or empty.
    public var offeredDPoPNonce: String? { dpopNonce.flatMap { $0.isEmpty ? nil : $0 } }
    public init(status: Int, body: [UInt8], retryAfter: String? = nil, date: String? = nil, bodyTooLarge: Bool = false,
                dpopNonce: String? = nil) {
        self.dpopNonce = dpopNonce
        self.status = status
        self.body = body
        self.retryAfter = retryAfter
        self.date = date
        self.bodyTooLarge = bodyTooLarge
    }
}

/// Turns a token endpoint reply into a ``TokenSet`` or an ``AuthError`` (SECURITY.md 12, 16).
public enum TokenResponseParser {
    /// Used when a server omits `expires_in` (it is only RECOMMENDED in RFC 6749 §5.1).
    public static let defaultLifetime: Duration = .seconds(3600)
    /// Longer than any real access token; anything above is treated as a broken response.
    public static let maximumLifetime: Int = 366 * 24 * 3600
    /// Ten years: above, `refresh_token_expires_in` is ignored.
    public static let maximumRefreshTokenLifetime: Int = 10 * 366 * 24 * 3600

    /// `proofSent`: the request carried a DPoP proof, so `token_type` `DPoP` (a bound access token) is expected, and
    /// `Bearer` means the server bound only the refresh token, or nothing (RFC 9449 §5).
    /// `refreshing`: the reply answers a refresh. Without `expires_in` and without a new refresh token it is then an
    /// ordinary token whose lifetime was not said (RFC 6749 §6: the refresh token sent stays valid), never one that
    /// does not expire; that reading is for a sign-in that gets no refresh token (a GitHub OAuth app's).
    public static func parse(_ reply: HTTPReply, receivedAt: ContinuousClock.Instant,
                             proofSent: Bool = false, refreshing: Bool = false) throws(AuthError) -> TokenSet {
        guard (200..<300).contains(reply.status) else { throw error(from: reply) }
        guard !reply.bodyTooLarge else {
            throw AuthError(.invalidTokenResponse, "the token endpoint answered HTTP \(reply.status) with a body too large to be a token response")
        }
        let json = jsonBody(reply.body)
        let body: Body
        do {
            body = try JSONValue.decode(Body.self, from: json)
        } catch let failure as AuthError {
            throw failure
        } catch let duplicate as DuplicateJSONMember {
            throw duplicate.authError(.invalidTokenResponse, "the token response")
        } catch {
            throw AuthError(.invalidTokenResponse,
                "the token endpoint answered HTTP \(reply.status) with a body that is not a valid token response")
        }
        // GitHub answers errors (`bad_refresh_token`, `bad_verification_code`) with HTTP 200.
        if body.access_token == nil, body.error != nil {
            throw error(from: HTTPReply(status: reply.status, body: json, retryAfter: reply.retryAfter))
        }
        guard let access = body.access_token, !access.isEmpty else {
            throw AuthError(.invalidTokenResponse, "the token response has no access_token")
        }
        let type = body.token_type?.lowercased()
        guard type == "bearer" || (proofSent && type == "dpop") else {
            let shown = body.token_type.map { "'\(LoginSession.printable($0))'" } ?? "none"
            throw AuthError(.invalidTokenResponse, proofSent
                ? "the token response has token_type \(shown); DPoP or Bearer expected"
                : "the token response has token_type \(shown) to a request without a DPoP proof; only Bearer is supported")
        }
        var lifetime = defaultLifetime
        let nonExpiring = !refreshing && body.expires_in == nil && body.refresh_token == nil
        if nonExpiring { lifetime = .seconds(maximumLifetime) }
        if let seconds = body.expires_in?.value {
            guard seconds > 0, seconds <= maximumLifetime else {
                throw AuthError(.invalidTokenResponse, "the token response has expires_in \(seconds), outside 1...\(maximumLifetime)")
            }
            lifetime = .seconds(seconds)
        }
        func nonEmpty(_ value: String?, _ key: String) throws(AuthError) -> String? {
            guard let value else { return nil }
            guard !value.isEmpty else { throw AuthError(.invalidTokenResponse, "the token response has an empty \(key)") }
            return value
        }
        var set = TokenSet(
            accessToken: Secret(access),
            tokenType: type == "dpop" ? "DPoP" : "Bearer",
            refreshToken: try nonEmpty(body.refresh_token, "refresh_token").map(Secret.init),
            idToken: try nonEmpty(body.id_token, "id_token").map(Secret.init),
            // GitHub separates scopes with commas ("repo,gist"); a comma is never part of a real provider's scope.
            scopes: body.scope.map { $0.split(whereSeparator: { $0 == " " || $0 == "," }).map(String.init) },
            lifetime: lifetime,
            receivedAt: receivedAt
        )
        set.nonExpiring = nonExpiring
        if let seconds = body.refresh_token_expires_in?.number {
            // A nonsensical value says nothing about the sign-in; it is dropped rather than failing the tokens.
            if seconds > 0, seconds <= maximumRefreshTokenLifetime { set.refreshTokenLifetime = seconds }
        }
        return set
    }

    /// The fields of RFC 6749 §5.1 we read. Unknown fields are ignored; wrong types fail decoding.
    private struct Body: Decodable {
        var access_token: String?
        var token_type: String?
        var expires_in: LenientInt?
        var refresh_token: String?
        var refresh_token_expires_in: Advisory?
        var id_token: String?
        var scope: String?
        var error: String?
    }

    /// The body as JSON. GitHub answers `application/x-www-form-urlencoded` unless asked for JSON (the transport
    /// asks, but a proxy may drop the header), so a body that is one line of `key=value&...` is read as that form
    /// (every value a string: ``LenientInt`` reads a numeric `expires_in`). Anything else is left as it came.
    static func jsonBody(_ body: [UInt8]) -> [UInt8] {
        guard let first = body.first, first != UInt8(ascii: "{"), first != UInt8(ascii: "["),
              body.contains(UInt8(ascii: "=")), body.allSatisfy({ (0x21...0x7E).contains($0) }),
              !body.contains(UInt8(ascii: "<")), let text = String(bytes: body, encoding: .ascii) else { return body }
        // Each field as a member of its own, a repeated one repeated, so that the duplicate-member rule that refuses
        // a JSON reply naming `access_token` twice refuses the same form reply too.
        var members: [String] = []
        for (key, values) in LoginSession.parseQuery(text).sorted(by: { $0.key < $1.key }) {
            for value in values {
                guard let name = try? JSONEncoder().encode(key), let text = try? JSONEncoder().encode(value) else { return body }
                members.append(String(decoding: name, as: UTF8.self) + ":" + String(decoding: text, as: UTF8.self))
            }
        }
        return Array(("{" + members.joined(separator: ",") + "}").utf8)
    }

    /// An integer, or an integer in a string (some providers send `"3600"`); never a fraction or a boolean.
    struct LenientInt: Decodable {
        var value: Int
        init(from decoder: Decoder) throws {
            let container = try decoder.singleValueContainer()
            if let number = try? container.decode(Int.self) {
                value = number
            } else if let text = try? container.decode(String.self), let number = Int(text) {
                value = number
            } else {
                throw AuthError(.invalidTokenResponse, "the token response has an invalid expires_in")
            }
        }
    }

    /// An advisory integer (`refresh_token_expires_in`): read like ``LenientInt``, nil when unreadable, never an error.
    struct Advisory: Decodable {
        var number: Int?
        init(from decoder: Decoder) throws {
            number = try? LenientInt(from: decoder).value
        }
    }

    /// Why a provider ended a sign-in, in words, from the code it puts in `error_description` (Microsoft's AADSTS
    /// codes, https://learn.microsoft.com/en-us/entra/identity-platform/reference-error-codes); nil when unknown.
    static func deadGrantReason(_ description: String?) -> String? {
        guard let description else { return nil }
        let reasons = [
            ("AADSTS700082", "the sign-in expired after a long time without use"),
            ("AADSTS700084", "the sign-in reached its maximum lifetime"),
            ("AADSTS50173", "the sign-in was revoked, for example because the password was changed or reset"),
            ("AADSTS70043", "the sign-in expired under a Conditional Access sign-in frequency policy"),
            ("AADSTS50076", "the organisation now requires multi-factor authentication"),
        ]
        guard let (code, reason) = reasons.first(where: { description.contains($0.0) }) else { return nil }
        return "\(reason) (\(code))"
    }

    /// The OAuth `error` code of a reply's JSON body, whatever its status; nil when it has none.
    public static func errorCode(_ reply: HTTPReply) -> String? {
        (try? JSONValue.object(jsonBody(reply.body)))??["error"]?.string
    }

    /// Classifies an error reply. `invalid_grant` means the refresh token (or code) is dead: sign-in required.
    /// So does a 4xx other than 408/429 that carries no OAuth error at all (an empty 400, a 401, an HTML page): the
    /// server refused the grant without saying why, and asking again would get the same answer. The endpoints that
    /// answer errors the token endpoint's way (RFC 9126 §2.3, RFC 8628 §3.2) are classified here too; `endpoint`
    /// names the one that answered in the message.
    public static func error(from reply: HTTPReply, endpoint: String = "token endpoint") -> AuthError {
        let retryAfter = reply.retryAfter.flatMap { Int($0.trimmingBlanks) }.map { min(max($0, 0), 3600) }
        let object: [String: JSONValue]?
        let unreadable: AuthError?
        do {
            object = try JSONValue.object(jsonBody(reply.body))
            unreadable = nil
        } catch {
            object = nil
            unreadable = error.authError(.invalidTokenResponse, "the \(endpoint)'s HTTP \(reply.status) reply")
        }
        let code = object?["error"]?.string.map(LoginSession.printable)
        let description = object?["error_description"]?.string.map(LoginSession.printable)
        let detail = [code, description].compactMap { $0 }.joined(separator: ": ")
        // RFC 9449 §5.2, §8: DPoP's errors are read whatever the HTTP status (some servers send 401, 403, even 5xx).
        // A nonce asked for again after the one retry, or without one to use (``TokenBroker/postToTokenEndpoint``
        // retries once when the answer carries one), is the server's failure.
        switch code {
        case "invalid_dpop_proof":
            return AuthError(.dpopRefused, "the authorization server refused the DPoP proof (\(detail))")
        case "use_dpop_nonce" where reply.offeredDPoPNonce == nil:
            return AuthError(.serverError, "the authorization server asked for a DPoP nonce but sent none in a DPoP-Nonce header (\(detail))")
        case "use_dpop_nonce":
            return AuthError(.serverError, "the authorization server kept asking for a new DPoP nonce (\(detail))")
        default:
            break
        }
        if reply.status == 408 || reply.status == 429 || reply.status >= 500 {
            return AuthError(.serverError, "the authorization server is unavailable (HTTP \(reply.status))", retryAfter: retryAfter)
        }
        if let unreadable { return unreadable }
        switch code {
        case "invalid_grant", "bad_refresh_token", "bad_verification_code":
            // GitHub's names for a dead refresh token or code; Microsoft says why in `error_description`.
            if let reason = deadGrantReason(description) {
                return AuthError(.loginRequired, "the authorization server ended the sign-in: \(reason)")
            }
            return AuthError(.loginRequired, "the authorization server rejected the grant (\(detail))")
        case "invalid_scope":
            return AuthError(.invalidScope, "the authorization server refused the requested scope (\(detail))")
        case "invalid_target":
            return AuthError(.invalidTarget, "the authorization server refused the requested resource (\(detail))")
        case "invalid_client", "unauthorized_client":
            return AuthError(.invalidClient, "the authorization server rejected the client (\(detail)): check client_id/client_secret")
        case .some:
            return AuthError(.serverError, "the \(endpoint) answered HTTP \(reply.status) (\(detail))")
        case nil where (400..<500).contains(reply.status):
            return AuthError(.loginRequired,
                "the \(endpoint) refused the sign-in with HTTP \(reply.status) and no OAuth error")
        case nil:
            return AuthError(.serverError, "the \(endpoint) answered HTTP \(reply.status) without an OAuth error")
        }
    }
}
