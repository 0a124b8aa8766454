#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// What the keyring holds for an account: its refresh token, or, for a server that issues neither a refresh token
/// nor an expiry (a GitHub OAuth app), the long-lived access token itself, so it survives a restart like a sign-in.
/// The access token is stored behind a marker no refresh token can start with (RFC 6749 Appendix A.17: a refresh
/// token is VSCHAR, 0x20-0x7E), so the one keyring item per account says which it is.
public enum StoredCredential: Equatable, Sendable {
    case refreshToken(Secret)
    case longLivedAccessToken(Secret)

    static let marker = "\u{1}access_token\u{1}"

    /// Reads a stored secret.
    public init(stored: Secret) {
        let text = stored.reveal()
        if text.hasPrefix(StoredCredential.marker) {
            self = .longLivedAccessToken(Secret(String(text.dropFirst(StoredCredential.marker.count))))
        } else {
            self = .refreshToken(stored)
        }
    }

    /// The secret to store.
    public var stored: Secret {
        switch self {
        case .refreshToken(let token): return token
        case .longLivedAccessToken(let token): return Secret(StoredCredential.marker + token.reveal())
        }
    }
}
