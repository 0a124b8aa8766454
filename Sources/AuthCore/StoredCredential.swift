import Foundation

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

/// The keyring item's secret carries the sign-in's end with the credential, so both are written in one store (a
/// rotation and its new deadline cannot part) and nothing about the sign-in is in plain text on disk:
/// `\u{1}valid_until=UNIX-SECONDS\u{1}` before the credential. Items written without it (before this existed, or
/// with no known deadline) read as they always did. An agent older than this header reads such an item as a
/// refresh token that the server then refuses: a downgrade costs the sign-ins that have a deadline.
extension StoredCredential {
    static let validUntilPrefix = "\u{1}valid_until="

    /// The payload to store: `credential` (a ``stored`` value) with `validUntil` when known.
    public static func seal(_ credential: Secret, validUntil: Date?) -> Secret {
        guard let validUntil else { return credential }
        return Secret("\(validUntilPrefix)\(Int64(validUntil.timeIntervalSince1970.rounded()))\u{1}" + credential.reveal())
    }

    /// A stored payload split into the credential (what ``init(stored:)`` reads) and the deadline, if any.
    public static func unseal(_ payload: Secret) -> (credential: Secret, validUntil: Date?) {
        let text = payload.reveal()
        guard text.hasPrefix(validUntilPrefix) else { return (payload, nil) }
        let rest = text.dropFirst(validUntilPrefix.count)
        guard let end = rest.firstIndex(of: "\u{1}"), let seconds = Int64(rest[..<end]) else { return (payload, nil) }
        return (Secret(String(rest[rest.index(after: end)...])), Date(timeIntervalSince1970: TimeInterval(seconds)))
    }
}
