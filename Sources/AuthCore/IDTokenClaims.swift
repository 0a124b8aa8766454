import Foundation

/// Claim checks on an OIDC ID token (OIDC Core §3.1.3.7): `alg` is not `none`, and `iss`, `aud`/`azp`, `exp`,
/// `iat` and `nonce` match the request.
///
/// Signature verification against the provider's JWKS is not done here yet (see docs/ARCHITECTURE.md): the token
/// arrives directly from the token endpoint over TLS, which OIDC Core §3.1.3.7 item 6 allows as the basis of trust.
public struct IDTokenClaims: Sendable, Equatable {
    public var subject: String?
    public var email: String?
    public var name: String?

    public static let leeway: Double = 300

    public static func validate(_ token: Secret, issuer: URL, clientID: String, nonce: Secret?, now: Date) throws(AuthError) -> IDTokenClaims {
        let parts = token.reveal().split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3,
              let headerData = Base64URL.decode(String(parts[0])),
              let payloadData = Base64URL.decode(String(parts[1])),
              let header = try? JSONSerialization.jsonObject(with: headerData) as? [String: Any],
              let claims = try? JSONSerialization.jsonObject(with: payloadData) as? [String: Any]
        else { throw AuthError(.invalidIDToken, "the ID token is not a well-formed JWT") }
        guard let alg = header["alg"] as? String, alg.lowercased() != "none", !parts[2].isEmpty else {
            throw AuthError(.invalidIDToken, "the ID token is unsigned (alg none)")
        }
        func trimmed(_ s: String) -> String { s.hasSuffix("/") ? String(s.dropLast()) : s }
        guard let iss = claims["iss"] as? String, trimmed(iss) == trimmed(issuer.absoluteString) else {
            throw AuthError(.invalidIDToken, "the ID token's issuer does not match")
        }
        let audiences: [String] = (claims["aud"] as? String).map { [$0] } ?? (claims["aud"] as? [String]) ?? []
        guard audiences.contains(clientID) else { throw AuthError(.invalidIDToken, "the ID token is not meant for this client (aud)") }
        if audiences.count > 1 || claims["azp"] != nil {
            guard claims["azp"] as? String == clientID else { throw AuthError(.invalidIDToken, "the ID token's azp does not match") }
        }
        guard let exp = (claims["exp"] as? NSNumber)?.doubleValue, exp + leeway > now.timeIntervalSince1970 else {
            throw AuthError(.invalidIDToken, "the ID token has expired")
        }
        if let iat = (claims["iat"] as? NSNumber)?.doubleValue, iat - leeway > now.timeIntervalSince1970 {
            throw AuthError(.invalidIDToken, "the ID token was issued in the future")
        }
        if let nonce {
            guard let got = claims["nonce"] as? String, nonce.constantTimeEquals(got) else {
                throw AuthError(.invalidIDToken, "the ID token's nonce does not match the request")
            }
        }
        return IDTokenClaims(subject: claims["sub"] as? String, email: claims["email"] as? String, name: claims["name"] as? String)
    }
}
