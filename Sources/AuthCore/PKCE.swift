import FoundationEssentials

import Crypto

/// RFC 7636 proof key: a 32-byte verifier (43 base64url characters) and its S256 challenge. `plain` is never used.
public struct PKCE: Sendable {
    public let verifier: Secret
    public let challenge: String
    public static let method = "S256"

    public init() { self.init(verifier: Randomness.token(bytes: 32)) }

    public init(verifier: String) {
        self.verifier = Secret(verifier)
        self.challenge = PKCE.challenge(for: verifier)
    }

    public static func challenge(for verifier: String) -> String {
        Base64URL.encode(SHA256.hash(data: Data(verifier.utf8)))
    }
}
