import FoundationEssentials
import JWTKit

/// Verifies an OIDC ID token (OIDC Core §3.1.3.7): the `alg` is one of ``allowedAlgorithms`` (never `none`, never
/// HMAC, whose "secret" would be a public key), the signature checks out against the provider's JWKS (jwt-kit does
/// the cryptography), and then the claims (``IDTokenClaims``).
///
/// The keys come from a ``KeySource``: the broker's per-account cache. An unknown `kid` asks it once more with
/// `refetch: true` (the provider may have rotated its keys) before the token is refused.
public struct IDTokenVerifier: Sendable {
    /// `refetch` is true when the cached set lacked the token's key.
    public typealias KeySource = @Sendable (_ refetch: Bool) async throws(AuthError) -> JSONWebKeySet

    /// Asymmetric algorithms jwt-kit verifies with a key from a JWKS.
    public static let allowedAlgorithms: Set<String> = ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512"]
    static let curves = ["ES256": "P-256", "ES384": "P-384", "ES512": "P-521"]

    /// The JOSE header fields the verifier uses.
    public struct Header: Sendable, Equatable {
        public var algorithm: String
        public var keyID: String?

        public init(_ token: Secret) throws(AuthError) {
            let parts = token.reveal().split(separator: ".", omittingEmptySubsequences: false)
            let object: [String: JSONValue]?
            do {
                object = try parts.count == 3 ? Base64URL.decode(String(parts[0])).flatMap(JSONValue.object) : nil
            } catch {
                throw error.authError(.invalidIDToken, "the ID token's header")
            }
            guard let object else { throw AuthError(.invalidIDToken, "the ID token is not a well-formed JWT") }
            guard let alg = object["alg"]?.string, alg.lowercased() != "none", !parts[2].isEmpty else {
                throw AuthError(.invalidIDToken, "the ID token is unsigned (alg none)")
            }
            guard IDTokenVerifier.allowedAlgorithms.contains(alg) else {
                throw AuthError(.invalidIDToken,
                    "the ID token is signed with an algorithm the agent does not accept (allowed: \(IDTokenVerifier.allowedAlgorithms.sorted().joined(separator: ", ")))")
            }
            if object["crit"] != nil {
                throw AuthError(.invalidIDToken, "the ID token has critical header extensions the agent does not understand")
            }
            algorithm = alg
            keyID = object["kid"]?.string
        }
    }

    public var issuer: URL
    public var clientID: String

    public init(issuer: URL, clientID: String) {
        self.issuer = issuer
        self.clientID = clientID
    }

    /// Verifies `token` and returns its claims.
    /// - Parameters:
    ///   - nonce: the sign-in request's nonce; nil for a token from a refresh.
    ///   - original: the claims of the ID token from the sign-in, for a token from a refresh (OIDC Core §12.2:
    ///     `iss`, `sub`, `aud` and `azp` must not change); nil when none is known.
    public func verify(_ token: Secret, nonce: Secret?, original: IDTokenClaims? = nil, now: Date,
                       keys: KeySource) async throws(AuthError) -> IDTokenClaims {
        let header = try Header(token)
        var key = try await keys(false).key(for: header)
        if key == nil { key = try await keys(true).key(for: header) }
        guard let key else {
            throw AuthError(.invalidIDToken, "the ID token is signed with a key that the provider's JWKS does not list")
        }
        try await IDTokenVerifier.checkSignature(token, header: header, key: key)
        return try IDTokenClaims.validate(token, issuer: issuer, clientID: clientID, nonce: nonce, now: now, original: original)
    }

    /// The one place jwt-kit sees the token: a collection holding only the chosen key, whose signer must be for the
    /// header's algorithm.
    static func checkSignature(_ token: Secret, header: Header, key: JSONWebKeySet.Key) async throws(AuthError) {
        var jwk = key.jwk
        // jwt-kit files keys by kid; the collection holds this key alone, so any label will do.
        if jwk.keyIdentifier == nil { jwk.keyIdentifier = JWKIdentifier(string: "sole-key") }
        do {
            let collection = JWTKeyCollection()
            try await collection.add(jwk: jwk, isDefault: true)
            let signer = try await collection.getKey(for: jwk.keyIdentifier, alg: header.algorithm)
            guard signer.name == header.algorithm else {
                throw AuthError(.invalidIDToken, "the provider's key is for \(signer.name), the ID token says \(header.algorithm)")
            }
            _ = try await collection.verify(token.reveal(), as: SignatureOnly.self)
        } catch let error as AuthError {
            throw error
        } catch let error as JWTError where error.errorType == .signatureVerificationFailed {
            throw AuthError(.invalidIDToken, "the ID token's signature does not verify with the provider's key")
        } catch {
            throw AuthError(.invalidIDToken, "the ID token's signature cannot be checked with the provider's key")
        }
    }
}

/// jwt-kit decodes a payload type after checking the signature; the claims are checked by ``IDTokenClaims``.
private struct SignatureOnly: JWTPayload {
    func verify(using algorithm: some JWTAlgorithm) async throws {}
}
