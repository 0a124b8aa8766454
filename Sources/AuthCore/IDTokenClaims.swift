import FoundationEssentials

/// The claims of an OIDC ID token and their checks (OIDC Core §3.1.3.7 items 2-3, 9-11): `iss`, `aud`/`azp`, `exp`,
/// `iat` (required, OIDC Core §2), `nbf` if present (RFC 7519 §4.1.5), each date with a bounded ``leeway``, and
/// `nonce` match the request. For a token from a refresh (§12.2), `iss`, `sub`, `aud` and `azp` must equal the
/// original's, `auth_time` (when both carry one) may not be earlier than the original's, and `nonce` need not be
/// present.
///
/// The signature is checked first, by ``IDTokenVerifier``; never trust these claims without it.
public struct IDTokenClaims: Sendable, Equatable {
    public var issuer: String
    public var subject: String
    public var audiences: [String]
    public var authorizedParty: String?
    /// Kept to compare a refreshed token's nonce with the original's; a nonce is single-use, not a secret.
    public var nonce: String?
    /// When the user authenticated (`auth_time`, Unix seconds), if the provider says: a refreshed token may not name an
    /// earlier one.
    public var authTime: Double?
    public var email: String?
    public var name: String?

    /// Clock skew tolerated on `exp`, `iat` and `nbf`.
    public static let leeway: Double = 300

    /// A date claim (RFC 7519 §2, NumericDate): nil when absent. One of another type is refused, never read as absent:
    /// a string `nbf` must not skip the check a number would fail.
    private static func date(_ name: String, in claims: [String: JSONValue]) throws(AuthError) -> Double? {
        guard let value = claims[name] else { return nil }
        guard let seconds = value.number else {
            throw AuthError(.invalidIDToken, "the ID token's \(name) is not a number")
        }
        return seconds
    }

    public static func validate(_ token: Secret, issuer: URL, clientID: String, nonce: Secret?, now: Date,
                                original: IDTokenClaims? = nil) throws(AuthError) -> IDTokenClaims {
        let parts = token.reveal().split(separator: ".", omittingEmptySubsequences: false)
        let object: [String: JSONValue]?
        do {
            object = try parts.count == 3 ? Base64URL.decode(String(parts[1])).flatMap(JSONValue.object) : nil
        } catch {
            throw error.authError(.invalidIDToken, "the ID token's claims")
        }
        guard let claims = object else { throw AuthError(.invalidIDToken, "the ID token is not a well-formed JWT") }
        _ = try IDTokenVerifier.Header(token)
        guard let iss = claims["iss"]?.string, ProviderMetadata.sameIssuer(iss, issuer.absoluteString) else {
            throw AuthError(.invalidIDToken, "the ID token's issuer does not match")
        }
        guard let sub = claims["sub"]?.string, !sub.isEmpty else { throw AuthError(.invalidIDToken, "the ID token has no subject (sub)") }
        let audiences: [String] = claims["aud"]?.string.map { [$0] } ?? claims["aud"]?.strings ?? []
        guard audiences.contains(clientID) else { throw AuthError(.invalidIDToken, "the ID token is not meant for this client (aud)") }
        let azp = claims["azp"]?.string
        if audiences.count > 1 || claims["azp"] != nil {
            guard azp == clientID else { throw AuthError(.invalidIDToken, "the ID token's azp does not match") }
        }
        let seconds = now.timeIntervalSince1970
        guard let exp = try date("exp", in: claims) else {
            throw AuthError(.invalidIDToken, "the ID token has no expiry (exp)")
        }
        guard exp + leeway > seconds else { throw AuthError(.invalidIDToken, "the ID token has expired") }
        guard let iat = try date("iat", in: claims) else {
            throw AuthError(.invalidIDToken, "the ID token has no issue time (iat)")
        }
        guard iat - leeway <= seconds else { throw AuthError(.invalidIDToken, "the ID token was issued in the future") }
        if let nbf = try date("nbf", in: claims), nbf - leeway > seconds {
            throw AuthError(.invalidIDToken, "the ID token is not valid yet (nbf)")
        }
        let authTime = try date("auth_time", in: claims)
        let gotNonce = claims["nonce"]?.string
        if let nonce {
            guard let gotNonce, nonce.constantTimeEquals(gotNonce) else {
                throw AuthError(.invalidIDToken, "the ID token's nonce does not match the request")
            }
        }
        let result = IDTokenClaims(issuer: iss, subject: sub, audiences: audiences, authorizedParty: azp, nonce: gotNonce,
                                   authTime: authTime, email: claims["email"]?.string, name: claims["name"]?.string)
        if let original {
            guard result.issuer == original.issuer, result.subject == original.subject,
                  Set(result.audiences) == Set(original.audiences), result.authorizedParty == original.authorizedParty
            else { throw AuthError(.invalidIDToken, "the refreshed ID token names another issuer, subject or audience than the sign-in's") }
            if let gotNonce, let first = original.nonce, gotNonce != first {
                throw AuthError(.invalidIDToken, "the refreshed ID token's nonce differs from the sign-in's")
            }
            // §12.2 says a refreshed token's auth_time is the original authentication's. A later one is the same
            // person having authenticated again at the provider since (a Keycloak SSO session re-authenticated for
            // another client; Django OAuth Toolkit sends the user's latest login anywhere): refusing it would break the
            // sign-in for nothing the person did wrong. One earlier than the sign-in's names an authentication this
            // sign-in cannot come from: refused.
            if let again = result.authTime, let first = original.authTime, again < first {
                throw AuthError(.invalidIDToken, "the refreshed ID token's auth_time is earlier than the sign-in's")
            }
        }
        return result
    }
}
