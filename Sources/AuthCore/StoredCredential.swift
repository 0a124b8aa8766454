import FoundationEssentials

/// What the keyring holds for an account: its refresh token, or, for a server that issues neither a refresh token
/// nor an expiry (a GitHub OAuth app), the long-lived access token itself, so it survives a restart like a sign-in;
/// and, for a sign-in bound to a DPoP key (RFC 9449), that key, in the same secret, so a token is never written
/// without its key or the reverse (one `SetSecret`); and the sign-in's ID token claims that a refreshed ID token must
/// repeat (OIDC Core §12.2), so the comparison survives a restart. They go in the secret, not in the item's plaintext
/// attributes: `sub` names the person. Markers start with a control character no token can start with (RFC 6749
/// Appendix A.17: a refresh token is VSCHAR, 0x20-0x7E), so a plain refresh token reads as itself, as it always has,
/// and an item written before a section existed reads without it.
///
/// The layout: `[key marker, key, \u{1}] [claims marker, claims, \u{1}] [access token marker] token`.
public struct StoredCredential: Equatable, Sendable {
    public enum Token: Equatable, Sendable {
        case refreshToken(Secret)
        case longLivedAccessToken(Secret)
    }

    public var token: Token
    /// The sign-in's DPoP key; nil for a sign-in without DPoP.
    public var proofKey: DPoPKey?
    /// The sign-in's ID token claims that a refreshed one is compared with (``IDTokenClaims``: `iss`, `sub`, `aud`,
    /// `azp`, `auth_time`, `nonce`; never `email` or `name`, which are not stored). Nil for a sign-in without an ID
    /// token, and in an item written before they were kept: its first refreshed ID token then becomes the reference.
    public var signInClaims: IDTokenClaims?

    static let accessTokenMarker = "\u{1}access_token\u{1}"
    /// The marker before a key names its algorithm. ES256's is the one written since DPoP came in: items in users'
    /// keyrings have it, so it must read as it always has.
    static func proofKeyMarker(_ algorithm: DPoPKey.Algorithm) -> String {
        switch algorithm {
        case .es256: return "\u{1}dpop_es256\u{1}"
        case .eddsa: return "\u{1}dpop_eddsa\u{1}"
        }
    }

    /// The marker before a key the TPM holds (``HeldKey``: its public point and the blob only that TPM can load).
    static let heldKeyMarker = "\u{1}dpop_tpm_es256\u{1}"

    /// The marker for `key`.
    static func proofKeyMarker(for key: DPoPKey) -> String {
        key.held != nil ? heldKeyMarker : proofKeyMarker(key.algorithm)
    }

    static let claimsMarker = "\u{1}id_claims\u{1}"

    public init(_ token: Token, proofKey: DPoPKey? = nil, signInClaims: IDTokenClaims? = nil) {
        self.token = token
        self.proofKey = proofKey
        self.signInClaims = signInClaims.map(StoredClaims.init).map(\.claims)
    }

    public static func refreshToken(_ token: Secret, proofKey: DPoPKey? = nil,
                                    signInClaims: IDTokenClaims? = nil) -> StoredCredential {
        StoredCredential(.refreshToken(token), proofKey: proofKey, signInClaims: signInClaims)
    }

    public static func longLivedAccessToken(_ token: Secret) -> StoredCredential {
        StoredCredential(.longLivedAccessToken(token))
    }

    /// Reads a stored secret. A key marker whose key does not read (someone else's edit) is an error: the token
    /// after it is bound to a key the agent no longer has.
    public init(stored: Secret) throws(AuthError) {
        var text = Substring(stored.reveal())
        proofKey = nil
        if text.hasPrefix(StoredCredential.heldKeyMarker) {
            text = text.dropFirst(StoredCredential.heldKeyMarker.count)
            guard let end = text.firstIndex(of: "\u{1}"), let key = HeldKey(stored: String(text[..<end])) else {
                throw AuthError(.loginRequired, "the keyring item's TPM-held DPoP key cannot be read; the account needs a new sign-in")
            }
            proofKey = DPoPKey(held: key)
            text = text[text.index(after: end)...]
        } else if let algorithm = DPoPKey.Algorithm.allCases.first(where: { text.hasPrefix(StoredCredential.proofKeyMarker($0)) }) {
            text = text.dropFirst(StoredCredential.proofKeyMarker(algorithm).count)
            guard let end = text.firstIndex(of: "\u{1}"),
                  let key = DPoPKey(stored: String(text[..<end]), algorithm: algorithm) else {
                throw AuthError(.loginRequired, "the keyring item's DPoP key cannot be read; the account needs a new sign-in")
            }
            proofKey = key
            text = text[text.index(after: end)...]
        }
        signInClaims = nil
        if text.hasPrefix(StoredCredential.claimsMarker) {
            text = text.dropFirst(StoredCredential.claimsMarker.count)
            guard let end = text.firstIndex(of: "\u{1}"), let claims = StoredClaims(stored: text[..<end]) else {
                throw AuthError(.loginRequired, "the keyring item's ID token claims cannot be read; the account needs a new sign-in")
            }
            signInClaims = claims.claims
            text = text[text.index(after: end)...]
        }
        if text.hasPrefix(StoredCredential.accessTokenMarker) {
            token = .longLivedAccessToken(Secret(String(text.dropFirst(StoredCredential.accessTokenMarker.count))))
        } else {
            token = .refreshToken(Secret(String(text)))
        }
    }

    /// The secret to store.
    public var stored: Secret {
        var sections = proofKey.map { StoredCredential.proofKeyMarker(for: $0) + $0.stored.reveal() + "\u{1}" } ?? ""
        if let signInClaims { sections += StoredCredential.claimsMarker + StoredClaims(signInClaims).stored + "\u{1}" }
        switch token {
        case .refreshToken(let token): return Secret(sections + token.reveal())
        case .longLivedAccessToken(let token): return Secret(sections + StoredCredential.accessTokenMarker + token.reveal())
        }
    }

    /// The refresh token, if that is what this is.
    public var refreshToken: Secret? {
        if case .refreshToken(let token) = token { return token }
        return nil
    }
}

/// The claims a ``StoredCredential`` keeps, as its secret holds them: JSON (sorted keys, so the same claims are always
/// the same text), base64url-encoded, so the section holds no `\u{1}`.
private struct StoredClaims: Codable {
    var iss: String
    var sub: String
    var aud: [String]
    var azp: String?
    var authTime: Double?
    var nonce: String?

    enum CodingKeys: String, CodingKey {
        case iss, sub, aud, azp, nonce
        case authTime = "auth_time"
    }

    init(_ claims: IDTokenClaims) {
        (iss, sub, aud, azp, authTime, nonce) = (claims.issuer, claims.subject, claims.audiences, claims.authorizedParty,
                                                  claims.authTime, claims.nonce)
    }

    init?(stored: Substring) {
        guard let bytes = Base64URL.decode(String(stored)),
              let read = try? JSONValue.decode(StoredClaims.self, from: bytes) else { return nil }
        self = read
    }

    var claims: IDTokenClaims {
        IDTokenClaims(issuer: iss, subject: sub, audiences: aud, authorizedParty: azp, nonce: nonce, authTime: authTime)
    }

    var stored: String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        // Encoding strings, numbers and arrays of strings cannot fail.
        return Base64URL.encode((try? encoder.encode(self)) ?? Data())
    }
}
