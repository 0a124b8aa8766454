@testable import AuthCore
import CryptoExtras
import Foundation
import JWTKit

/// Keys made for this test run (never checked in), and ID tokens signed with them by jwt-kit.
enum TestKeys {
    static let rsaBacking = try! _RSA.Signing.PrivateKey(keySize: .bits2048)
    static let rsa = try! JWTKit.Insecure.RSA.PrivateKey(backing: rsaBacking)
    /// Another RSA key: a token it signs under `rsa`'s kid has a bad signature.
    static let otherRSA = try! JWTKit.Insecure.RSA.PrivateKey(backing: _RSA.Signing.PrivateKey(keySize: .bits2048))
    static let ec = ES256PrivateKey()

    static func jwk(rsa key: JWTKit.Insecure.RSA.PrivateKey, kid: String, alg: String? = "RS256") -> [String: Any] {
        let (n, e) = try! key.publicKey.getKeyPrimitives()
        var jwk: [String: Any] = ["kty": "RSA", "kid": kid, "use": "sig", "n": Base64URL.encode(n), "e": Base64URL.encode(e)]
        if let alg { jwk["alg"] = alg }
        return jwk
    }

    static func jwk(ec key: ES256PrivateKey, kid: String) -> [String: Any] {
        let point = key.publicKey.parameters!
        return ["kty": "EC", "crv": "P-256", "kid": kid, "use": "sig", "x": point.x, "y": point.y]
    }

    static func jwks(_ keys: [[String: Any]]) -> [UInt8] {
        Array(try! JSONSerialization.data(withJSONObject: ["keys": keys]))
    }

    /// The set the fake provider publishes by default: the RSA key as "rsa-1" and the EC key as "ec-1".
    static var defaultJWKS: [UInt8] { jwks([jwk(rsa: rsa, kid: "rsa-1"), jwk(ec: ec, kid: "ec-1")]) }

    struct Claims: JWTPayload {
        var iss = "https://issuer.example"
        var sub = "alice"
        var aud: [String] = ["client-1"]
        var exp = 1_800_003_600
        var iat = 1_800_000_000
        var nonce: String?
        var azp: String?
        var email: String? = "alice@example.test"
        var auth_time: Int?
        func verify(using algorithm: some JWTAlgorithm) async throws {}
    }

    enum Algorithm { case rs256, ps256, es256 }

    /// A token signed by jwt-kit with `key` (default: the published RSA key), `kid` in the header.
    static func sign(_ claims: Claims, kid: String? = "rsa-1", with algorithm: Algorithm = .rs256,
                     rsaKey: JWTKit.Insecure.RSA.PrivateKey = rsa) async -> String {
        let keys = JWTKeyCollection()
        switch algorithm {
        case .rs256: await keys.add(rsa: rsaKey, digestAlgorithm: .sha256)
        case .ps256: await keys.add(pss: rsaKey, digestAlgorithm: .sha256)
        case .es256: await keys.add(ecdsa: ec)
        }
        var header = JWTHeader()
        if let kid { header.kid = kid }
        return try! await keys.sign(claims, header: header)
    }

    /// Algorithm confusion: HS256 "signed" with the RSA public key's PEM as the HMAC secret, under the RSA kid. A
    /// verifier that picks the algorithm from the header and feeds it the key bytes would accept it.
    static func hmacWithPublicKey(_ claims: Claims, kid: String = "rsa-1") async -> String {
        let keys = JWTKeyCollection()
        await keys.add(hmac: HMACKey(from: rsa.publicKey.pemRepresentation), digestAlgorithm: .sha256)
        var header = JWTHeader()
        header.kid = kid
        return try! await keys.sign(claims, header: header)
    }

    /// A token whose header and payload are exactly the JSON texts given (jwt-kit only signs what it encodes, which
    /// never repeats a member), RS256-signed with the published RSA key under kid "rsa-1" when `header` says so.
    static func signRaw(header: String, payload: String) -> String {
        let input = Base64URL.encode(Array(header.utf8)) + "." + Base64URL.encode(Array(payload.utf8))
        let signature = try! rsaBacking.signature(for: Array(input.utf8), padding: .insecurePKCS1v1_5)
        return input + "." + Base64URL.encode(Array(signature.rawRepresentation))
    }

    /// `alg: none` with an empty signature, and the same with a junk signature.
    static func unsigned(_ claims: Claims) -> [String] {
        let header = Base64URL.encode(try! JSONSerialization.data(withJSONObject: ["alg": "none", "typ": "JWT"]))
        let payload = Base64URL.encode(try! JSONEncoder().encode(claims))
        return ["\(header).\(payload).", "\(header).\(payload).c2ln"]
    }
}
