import FoundationEssentials

/// A DPoP key made inside hardware that never lets it out (the TPM, `dpop_key = "tpm"`): what the agent keeps of it
/// is its public point and ``blob``, the form its holder loads it from (for the TPM, the marshalled `TPM2B_PUBLIC` and
/// `TPM2B_PRIVATE`: the private part wrapped by that TPM's own storage key, so only that TPM can load it). Nothing in
/// it is private key material: a copy of the keyring item is useless without the TPM that made it. Always ES256.
public struct HeldKey: Sendable, Equatable {
    /// The public point's coordinates, 32 bytes each.
    public let x: Data
    public let y: Data
    /// The key as its holder loads it; opaque here.
    public let blob: Data

    /// The largest blob read back (a P-256 key's is about 220 bytes).
    static let blobLimit = 2048

    /// nil when a coordinate is longer than 32 significant bytes or the blob is empty or too large. Shorter
    /// coordinates (leading zeros stripped by some stacks) are padded.
    public init?(x: Data, y: Data, blob: Data) {
        guard let x = HeldKey.fixedWidth(x), let y = HeldKey.fixedWidth(y), !blob.isEmpty,
              blob.count <= HeldKey.blobLimit else { return nil }
        self.x = x
        self.y = y
        self.blob = blob
    }

    /// As the keyring item's secret holds it: base64url of `x || y`, a dot, base64url of the blob.
    public var stored: String { Base64URL.encode(x + y) + "." + Base64URL.encode(blob) }

    /// Reads ``stored``; nil for anything else.
    public init?(stored: String) {
        let parts = stored.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 2, let point = Base64URL.decode(String(parts[0])), point.count == 64,
              let blob = Base64URL.decode(String(parts[1])) else { return nil }
        self.init(x: point.prefix(32), y: point.suffix(32), blob: blob)
    }

    /// An ECDSA P-256 signature as a JWS carries it (RFC 7518 §3.4): `r || s`, each exactly 32 bytes, whatever the
    /// holder returned (a TPM gives each as a sized buffer, and some stacks strip leading zeros or keep a sign byte).
    /// nil when either is longer than 32 significant bytes or empty.
    public static func jwsSignature(r: Data, s: Data) -> Data? {
        guard !r.isEmpty, !s.isEmpty, let r = fixedWidth(r), let s = fixedWidth(s) else { return nil }
        return r + s
    }

    /// `bytes` as a 32-byte big-endian number: leading zeros dropped, then left-padded with zeros.
    static func fixedWidth(_ bytes: Data) -> Data? {
        let significant = bytes.drop { $0 == 0 }
        guard significant.count <= 32 else { return nil }
        return Data(repeating: 0, count: 32 - significant.count) + significant
    }
}

/// Where held keys are made and used: the TPM (`TPMKeys.TPMKeyHolder`, over tpm2-tss). Every call is bounded in time
/// by the adapter. Errors: `tpm_unavailable` when the holder does not answer (no TPM, no permission, a stopped
/// simulator, a call over its deadline); `login_required` when it answers but will not load the key (a key made by
/// another TPM, or by this one before it was cleared), in words that say so.
public protocol KeyHolder: Sendable {
    /// Makes a new ES256 signing key.
    func createKey() async throws(AuthError) -> HeldKey
    /// Signs a SHA-256 `digest` with `key`: `r || s`, 64 bytes (``HeldKey/jwsSignature(r:s:)``).
    func sign(digest: Data, with key: HeldKey) async throws(AuthError) -> Data
    /// Whether the holder answers now, for `authctl doctor`; never makes a key.
    func check() async -> KeyHolderCheck
}

/// What ``KeyHolder/check()`` found: where the holder was asked (`tpm_tcti`), and the problem when it did not answer.
public struct KeyHolderCheck: Sendable, Equatable {
    public var place: String
    /// nil: it answered.
    public var problem: AuthError?

    public init(place: String, problem: AuthError?) {
        self.place = place
        self.problem = problem
    }
}
