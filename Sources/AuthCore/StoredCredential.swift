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

/// The form in which agents before ``KeyringItem`` kept the sign-in's dates: a header inside the secret,
/// `\u{1}valid_until=UNIX-SECONDS\u{1}` and maybe `\u{1}warned_at=UNIX-SECONDS\u{1}`, before the credential. Only
/// read now (an item in this form is rewritten with the dates as attributes at its next write); a secret without the
/// header reads as it is.
extension StoredCredential {
    static let validUntilKey = "valid_until"
    static let warnedAtKey = "warned_at"

    /// A stored secret split into the credential (what ``init(stored:)`` reads) and the dates of its header, if any.
    public static func unseal(_ payload: Secret) -> (credential: Secret, validUntil: Date?, warnedAt: Date?) {
        var rest = Substring(payload.reveal())
        var dates: [String: Date] = [:]
        for key in [validUntilKey, warnedAtKey] {
            let prefix = "\u{1}\(key)="
            guard rest.hasPrefix(prefix) else { break }
            let value = rest.dropFirst(prefix.count)
            guard let end = value.firstIndex(of: "\u{1}"), let seconds = Int64(value[..<end]) else { break }
            dates[key] = Date(timeIntervalSince1970: TimeInterval(seconds))
            rest = value[value.index(after: end)...]
        }
        guard dates[validUntilKey] != nil else { return (payload, nil, nil) }
        return (Secret(String(rest)), dates[validUntilKey], dates[warnedAtKey])
    }
}
