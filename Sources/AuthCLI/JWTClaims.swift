import FoundationEssentials

/// Reads claims from a JWT's payload without verifying it. Only for local decisions about a token the agent
/// already validated (such as when to ask again); never for trusting what a token says.
public enum JWTClaims {
    /// The `exp` claim (Unix seconds), or nil if the token is not a JWS compact serialization or has no numeric `exp`.
    public static func expiry(of token: String) -> Int? {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let payload = base64URLDecode(parts[1]) else { return nil }
        struct Claims: Decodable { var exp: Double? }
        guard let exp = (try? JSONDecoder().decode(Claims.self, from: payload))?.exp, exp.isFinite,
              exp > 0, exp < 253_402_300_800 else { return nil }  // before year 10000
        return Int(exp)
    }

    static func base64URLDecode(_ text: Substring) -> Data? {
        guard !text.isEmpty else { return nil }
        var base64 = String(text.map { $0 == "-" ? "+" : $0 == "_" ? "/" : $0 })
        base64 += String(repeating: "=", count: (4 - base64.count % 4) % 4)
        return Data(base64Encoded: base64)
    }
}
