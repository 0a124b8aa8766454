import Crypto
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// A sign-in's DPoP proof key (RFC 9449): ES256, a P-256 key made at sign-in and kept in the keyring item beside
/// the refresh token (``StoredCredential``), so the two are written in one step. The private key never leaves the
/// agent: programs get proofs (``proof(method:url:accessToken:nonce:issuedAt:id:)``), never the key.
public struct DPoPKey: Sendable, Equatable {
    public static let algorithm = "ES256"
    private let key: P256.Signing.PrivateKey

    /// A new key from the system's CSPRNG.
    public init() { key = P256.Signing.PrivateKey() }

    /// The key as stored (``stored``); nil when it is not a P-256 scalar.
    public init?(stored: String) {
        guard let raw = Base64URL.decode(stored), raw.count == 32,
              let key = try? P256.Signing.PrivateKey(rawRepresentation: raw) else { return nil }
        self.key = key
    }

    /// The private scalar, base64url: only ever written into the keyring item's secret.
    public var stored: Secret { Secret(Base64URL.encode(key.rawRepresentation)) }

    public static func == (lhs: DPoPKey, rhs: DPoPKey) -> Bool { lhs.key.rawRepresentation == rhs.key.rawRepresentation }

    /// The public key's coordinates, base64url.
    private var coordinates: (x: String, y: String) {
        let point = Array(key.publicKey.x963Representation)  // 0x04 || X || Y
        return (Base64URL.encode(point[1...32]), Base64URL.encode(point[33...64]))
    }

    /// The JWK SHA-256 thumbprint (RFC 7638): the required members in lexicographic order, no whitespace. It is
    /// `dpop_jkt` in an authorization request and the `jkt` a server binds tokens to.
    public var thumbprint: String {
        let (x, y) = coordinates
        // Base64url values need no JSON escaping, so this text is the canonical form exactly.
        return Base64URL.encode(SHA256.hash(data: Data(#"{"crv":"P-256","kty":"EC","x":"\#(x)","y":"\#(y)"}"#.utf8)))
    }

    /// A DPoP proof JWT (RFC 9449 §4.2) for one request: `htm` and `htu` as given (the URL without query and
    /// fragment, §4.2), `iat` and `jti` from the caller (the agent's clock and a fresh random value, never a
    /// program's), `ath` when an access token goes with it, and the server's `nonce` when it asked for one.
    public func proof(method: String, url: URL, accessToken: Secret? = nil, nonce: String? = nil,
                      issuedAt: Date, id: String = Randomness.token(bytes: 16)) -> Secret {
        let (x, y) = coordinates
        let header = Header(jwk: .init(x: x, y: y))
        let claims = Claims(jti: id, htm: method, htu: DPoPKey.target(url), iat: Int64(issuedAt.timeIntervalSince1970),
                            ath: accessToken.map { Base64URL.encode(SHA256.hash(data: Data($0.reveal().utf8))) },
                            nonce: nonce)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.withoutEscapingSlashes]
        // Encoding these plain structs cannot fail.
        let input = Base64URL.encode((try? encoder.encode(header)) ?? Data()) + "."
            + Base64URL.encode((try? encoder.encode(claims)) ?? Data())
        let signature = (try? key.signature(for: Data(input.utf8)))?.rawRepresentation ?? Data()
        return Secret(input + "." + Base64URL.encode(signature))
    }

    /// `htu`: the request's URL without its query and fragment (RFC 9449 §4.2).
    public static func target(_ url: URL) -> String {
        guard var parts = URLComponents(url: url, resolvingAgainstBaseURL: false) else { return url.absoluteString }
        parts.query = nil
        parts.fragment = nil
        return parts.string ?? url.absoluteString
    }

    private struct Header: Encodable {
        struct JWK: Encodable {
            var kty = "EC"
            var crv = "P-256"
            var x: String
            var y: String
        }
        var typ = "dpop+jwt"
        var alg = DPoPKey.algorithm
        var jwk: JWK
    }

    private struct Claims: Encodable {
        var jti: String
        var htm: String
        var htu: String
        var iat: Int64
        var ath: String?
        var nonce: String?
    }
}
