import Crypto
import FoundationEssentials

/// A sign-in's DPoP proof key (RFC 9449), made at sign-in and kept in the keyring item beside the refresh token
/// (``StoredCredential``), so the two are written in one step: ES256 (a P-256 key), or EdDSA (an Ed25519 key, RFC
/// 8037) for a server that offers EdDSA and not ES256 (``Algorithm/preferred(offered:)``); or, with `dpop_key =
/// "tpm"`, an ES256 key held by the TPM (``HeldKey``), which the agent never has at all: the item keeps only the blob
/// that TPM alone can load, and every signature is the TPM's (``KeyHolder``). The private key never leaves the agent:
/// programs get proofs (``proof(method:url:accessToken:nonce:issuedAt:id:holder:)``), never the key. Every proof,
/// whichever key signs it, is made by that one method.
public struct DPoPKey: Sendable, Equatable {
    /// The proof algorithms the agent signs with, as `dpop_signing_alg_values_supported` names them.
    public enum Algorithm: String, Sendable, CaseIterable {
        case es256 = "ES256"
        case eddsa = "EdDSA"

        /// The algorithm for a sign-in against a server offering `offered`: ES256 whenever it is offered, EdDSA
        /// only without it; nil when the server offers neither.
        public static func preferred(offered: [String]) -> Algorithm? {
            allCases.first { offered.contains($0.rawValue) }
        }
    }

    private enum Material: Sendable {
        case p256(P256.Signing.PrivateKey)
        case ed25519(Curve25519.Signing.PrivateKey)
        case held(HeldKey)
    }

    private let material: Material

    /// A new key from the system's CSPRNG.
    public init(_ algorithm: Algorithm = .es256) {
        switch algorithm {
        case .es256: material = .p256(P256.Signing.PrivateKey())
        case .eddsa: material = .ed25519(Curve25519.Signing.PrivateKey())
        }
    }

    /// A key the TPM holds.
    public init(held: HeldKey) {
        material = .held(held)
    }

    /// The key as stored (``stored``) for `algorithm`; nil when it is not a 32-byte P-256 scalar or Ed25519 seed.
    public init?(stored: String, algorithm: Algorithm = .es256) {
        guard let raw = Base64URL.decode(stored), raw.count == 32 else { return nil }
        switch algorithm {
        case .es256:
            guard let key = try? P256.Signing.PrivateKey(rawRepresentation: raw) else { return nil }
            material = .p256(key)
        case .eddsa:
            guard let key = try? Curve25519.Signing.PrivateKey(rawRepresentation: raw) else { return nil }
            material = .ed25519(key)
        }
    }

    /// The proof algorithm: the `alg` of every proof this key signs.
    public var algorithm: Algorithm {
        switch material {
        case .p256, .held: return .es256
        case .ed25519: return .eddsa
        }
    }

    /// The TPM's key, when this is one.
    public var held: HeldKey? {
        if case .held(let key) = material { return key }
        return nil
    }

    /// The private scalar (P-256) or seed (Ed25519), base64url; for a held key its public point and blob
    /// (``HeldKey/stored``): only ever written into the keyring item's secret.
    public var stored: Secret {
        if case .held(let key) = material { return Secret(key.stored) }
        return Secret(Base64URL.encode(privateBytes))
    }

    private var privateBytes: Data {
        switch material {
        case .p256(let key): return key.rawRepresentation
        case .ed25519(let key): return key.rawRepresentation
        case .held(let key): return key.blob
        }
    }

    public static func == (lhs: DPoPKey, rhs: DPoPKey) -> Bool {
        lhs.algorithm == rhs.algorithm && lhs.held == rhs.held && lhs.privateBytes == rhs.privateBytes
    }

    /// The public JWK's required members (RFC 7638 §3.2), all base64url or fixed names, so none needs JSON escaping.
    private var jwk: JWK {
        switch material {
        case .p256(let key):
            let point = Array(key.publicKey.x963Representation)  // 0x04 || X || Y
            return JWK(kty: "EC", crv: "P-256", x: Base64URL.encode(point[1...32]), y: Base64URL.encode(point[33...64]))
        case .ed25519(let key):
            return JWK(kty: "OKP", crv: "Ed25519", x: Base64URL.encode(key.publicKey.rawRepresentation), y: nil)
        case .held(let key):
            return JWK(kty: "EC", crv: "P-256", x: Base64URL.encode(key.x), y: Base64URL.encode(key.y))
        }
    }

    /// The JWK SHA-256 thumbprint (RFC 7638): the required members in lexicographic order, no whitespace (crv,
    /// kty, x, y for EC; crv, kty, x for OKP, RFC 8037 §2). It is `dpop_jkt` in an authorization request and the
    /// `jkt` a server binds tokens to.
    public var thumbprint: String {
        let jwk = jwk
        let y = jwk.y.map { #","y":"\#($0)""# } ?? ""
        // Base64url values need no JSON escaping, so this text is the canonical form exactly.
        let canonical = #"{"crv":"\#(jwk.crv)","kty":"\#(jwk.kty)","x":"\#(jwk.x)"\#(y)}"#
        return Base64URL.encode(SHA256.hash(data: Data(canonical.utf8)))
    }

    /// The JWS signature of `input`: by the key in memory, or by the TPM (`holder`) for a held key, which may fail
    /// (`tpm_unavailable`, or `login_required` for a key another TPM made: ``KeyHolder``).
    private func sign(_ input: Data, holder: (any KeyHolder)?) async throws(AuthError) -> Data {
        switch material {
        case .p256(let key): return (try? key.signature(for: input))?.rawRepresentation ?? Data()
        case .ed25519(let key): return (try? key.signature(for: input)) ?? Data()
        case .held(let key):
            guard let holder else { throw AuthError(.tpmUnavailable, "the account's DPoP key is held by a TPM, and the agent has none configured") }
            return try await holder.sign(digest: Data(SHA256.hash(data: input)), with: key)
        }
    }

    /// A DPoP proof JWT (RFC 9449 §4.2) for one request: `htm` and `htu` as given (the URL without query and
    /// fragment, §4.2), `iat` and `jti` from the caller (the agent's clock and a fresh random value, never a
    /// program's), `ath` when an access token goes with it, and the server's `nonce` when it asked for one. A held key
    /// signs through `holder` (the TPM): that is the one step that can fail or take time.
    public func proof(method: String, url: URL, accessToken: Secret? = nil, nonce: String? = nil,
                      issuedAt: Date, id: String = Randomness.token(bytes: 16),
                      holder: (any KeyHolder)? = nil) async throws(AuthError) -> Secret {
        let header = Header(alg: algorithm.rawValue, jwk: jwk)
        let claims = Claims(jti: id, htm: method, htu: DPoPKey.target(url), iat: Int64(issuedAt.timeIntervalSince1970),
                            ath: accessToken.map { Base64URL.encode(SHA256.hash(data: Data($0.reveal().utf8))) },
                            nonce: nonce)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.withoutEscapingSlashes]
        // Encoding these plain structs cannot fail.
        let input = Base64URL.encode((try? encoder.encode(header)) ?? Data()) + "."
            + Base64URL.encode((try? encoder.encode(claims)) ?? Data())
        return Secret(input + "." + Base64URL.encode(try await sign(Data(input.utf8), holder: holder)))
    }

    /// `htu`: the request's URL without its query and fragment (RFC 9449 §4.2).
    public static func target(_ url: URL) -> String {
        guard var parts = URLComponents(url: url, resolvingAgainstBaseURL: false) else { return url.absoluteString }
        parts.query = nil
        parts.fragment = nil
        return parts.string ?? url.absoluteString
    }

    /// A public JWK: `y` only for EC (an OKP key has none, RFC 8037 §2).
    private struct JWK: Encodable {
        var kty: String
        var crv: String
        var x: String
        var y: String?
    }

    private struct Header: Encodable {
        var typ = "dpop+jwt"
        var alg: String
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
