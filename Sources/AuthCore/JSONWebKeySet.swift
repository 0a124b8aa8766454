import FoundationEssentials
import JWTKit

/// The provider's public signing keys (RFC 7517), read from its `jwks_uri`.
///
/// Only keys the agent can verify ID tokens with are kept: RSA and EC keys, not marked `"use": "enc"`. Keys of other
/// types (or that jwt-kit cannot read) are skipped rather than failing the whole set, so a provider that publishes,
/// say, an encryption key next to its signing keys still works.
public struct JSONWebKeySet: Sendable {
    struct Key: Sendable {
        let jwk: JWK
        var kid: String? { jwk.keyIdentifier?.string }
        var keyType: String { jwk.keyType.rawValue }
        var algorithm: String? { jwk.algorithm?.rawValue }
        var curve: String? { jwk.curve?.rawValue }
    }

    let keys: [Key]

    /// The number of usable signing keys.
    public var count: Int { keys.count }

    public static func parse(_ body: [UInt8]) throws(AuthError) -> JSONWebKeySet {
        let document: Document
        do {
            document = try JSONValue.decode(Document.self, from: body)
        } catch let duplicate as DuplicateJSONMember {
            throw duplicate.authError(.invalidMetadata, "the provider's JWKS")
        } catch {
            throw AuthError(.invalidMetadata, "the provider's JWKS is not a JSON object with a 'keys' array")
        }
        var keys: [Key] = []
        for entry in document.keys {
            guard let fields = entry.fields.object, let kty = fields["kty"]?.string, kty == "RSA" || kty == "EC" else { continue }
            if let use = fields["use"]?.string, use != "sig" { continue }
            guard let jwk = entry.jwk else { continue }
            keys.append(Key(jwk: jwk))
        }
        return JSONWebKeySet(keys: keys)
    }

    private struct Document: Decodable {
        let keys: [Entry]
    }

    /// One member of `keys` as published, and the key if jwt-kit can read it (both from the same JSON).
    private struct Entry: Decodable {
        let fields: JSONValue
        let jwk: JWK?

        init(from decoder: any Decoder) throws {
            fields = try JSONValue(from: decoder)
            jwk = try? JWK(from: decoder)
        }
    }

    /// The key that may verify a token with this header, or nil when the set has none (an unknown `kid`: the
    /// provider may have rotated its keys, so the caller refetches once).
    ///
    /// A key qualifies when its `kid` equals the header's, its type fits the algorithm (RSA for RS*/PS*, EC on the
    /// matching curve for ES*), and its own `alg`, if it names one, is the header's. Without a `kid` in the header the
    /// set must hold exactly one qualifying key (OIDC Core §10.1).
    func key(for header: IDTokenVerifier.Header) throws(AuthError) -> Key? {
        let candidates = keys.filter { key in
            guard key.algorithm == nil || key.algorithm == header.algorithm else { return false }
            switch header.algorithm.prefix(2) {
            case "RS", "PS": return key.keyType == "RSA"
            case "ES": return key.keyType == "EC" && key.curve == IDTokenVerifier.curves[header.algorithm]
            default: return false
            }
        }
        guard let kid = header.keyID else {
            if candidates.count > 1 {
                throw AuthError(.invalidIDToken, "the ID token names no key (kid) and the provider publishes several")
            }
            return candidates.first
        }
        return candidates.first { $0.kid == kid }
    }
}
