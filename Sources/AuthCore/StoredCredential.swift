import FoundationEssentials

/// What the keyring holds for an account: its refresh token, or, for a server that issues neither a refresh token
/// nor an expiry (a GitHub OAuth app), the long-lived access token itself, so it survives a restart like a sign-in;
/// and, for a sign-in bound to a DPoP key (RFC 9449), that key, in the same secret, so a token is never written
/// without its key or the reverse (one `SetSecret`). Markers start with a control character no token can start with
/// (RFC 6749 Appendix A.17: a refresh token is VSCHAR, 0x20-0x7E), so a plain refresh token reads as itself, as it
/// always has.
public struct StoredCredential: Equatable, Sendable {
    public enum Token: Equatable, Sendable {
        case refreshToken(Secret)
        case longLivedAccessToken(Secret)
    }

    public var token: Token
    /// The sign-in's DPoP key; nil for a sign-in without DPoP.
    public var proofKey: DPoPKey?

    static let accessTokenMarker = "\u{1}access_token\u{1}"
    /// The marker before a key names its algorithm. ES256's is the one written since DPoP came in: items in users'
    /// keyrings have it, so it must read as it always has.
    static func proofKeyMarker(_ algorithm: DPoPKey.Algorithm) -> String {
        switch algorithm {
        case .es256: return "\u{1}dpop_es256\u{1}"
        case .eddsa: return "\u{1}dpop_eddsa\u{1}"
        }
    }

    public init(_ token: Token, proofKey: DPoPKey? = nil) {
        self.token = token
        self.proofKey = proofKey
    }

    public static func refreshToken(_ token: Secret, proofKey: DPoPKey? = nil) -> StoredCredential {
        StoredCredential(.refreshToken(token), proofKey: proofKey)
    }

    public static func longLivedAccessToken(_ token: Secret) -> StoredCredential {
        StoredCredential(.longLivedAccessToken(token))
    }

    /// Reads a stored secret. A key marker whose key does not read (someone else's edit) is an error: the token
    /// after it is bound to a key the agent no longer has.
    public init(stored: Secret) throws(AuthError) {
        var text = Substring(stored.reveal())
        proofKey = nil
        if let algorithm = DPoPKey.Algorithm.allCases.first(where: { text.hasPrefix(StoredCredential.proofKeyMarker($0)) }) {
            text = text.dropFirst(StoredCredential.proofKeyMarker(algorithm).count)
            guard let end = text.firstIndex(of: "\u{1}"),
                  let key = DPoPKey(stored: String(text[..<end]), algorithm: algorithm) else {
                throw AuthError(.loginRequired, "the keyring item's DPoP key cannot be read; the account needs a new sign-in")
            }
            proofKey = key
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
        let key = proofKey.map { StoredCredential.proofKeyMarker($0.algorithm) + $0.stored.reveal() + "\u{1}" } ?? ""
        switch token {
        case .refreshToken(let token): return Secret(key + token.reveal())
        case .longLivedAccessToken(let token): return Secret(key + StoredCredential.accessTokenMarker + token.reveal())
        }
    }

    /// The refresh token, if that is what this is.
    public var refreshToken: Secret? {
        if case .refreshToken(let token) = token { return token }
        return nil
    }
}
