import Crypto
import FoundationEssentials

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
