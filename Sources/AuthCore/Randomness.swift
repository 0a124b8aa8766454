import Crypto
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// CSPRNG-backed random values. `SystemRandomNumberGenerator` reads `getrandom(2)` on Linux.
public enum Randomness {
    public static func bytes(_ count: Int) -> [UInt8] {
        var generator = SystemRandomNumberGenerator()
        return (0..<count).map { _ in UInt8.random(in: .min ... .max, using: &generator) }
    }

    /// `count` random bytes as unpadded base64url.
    public static func token(bytes count: Int) -> String { Base64URL.encode(bytes(count)) }
}

public enum Base64URL {
    public static func encode<D: Sequence>(_ data: D) -> String where D.Element == UInt8 {
        String(Data(data).base64EncodedString().compactMap { c -> Character? in
            c == "+" ? "-" : c == "/" ? "_" : c == "=" ? nil : c
        })
    }

    public static func decode(_ text: String) -> Data? {
        var s = String(text.map { $0 == "-" ? "+" : $0 == "_" ? "/" : $0 })
        while s.count % 4 != 0 { s += "=" }
        return Data(base64Encoded: s)
    }
}

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
