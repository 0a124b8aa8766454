/// A secret string (token, code, verifier, client secret) that never prints itself.
///
/// `description`, `debugDescription`, reflection and string interpolation all yield `<redacted>`, so a secret
/// that slips into a log line, an error message or a test failure shows nothing. The value is reachable only
/// through ``reveal()``, which makes every use greppable.
public struct Secret: Sendable, Hashable, CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    private let value: String

    public init(_ value: String) { self.value = value }

    /// The secret itself. Call only where the value must leave the process (HTTP body, keyring, socket reply).
    public func reveal() -> String { value }

    public var isEmpty: Bool { value.isEmpty }
    public var description: String { "<redacted>" }
    public var debugDescription: String { "<redacted>" }
    public var customMirror: Mirror { Mirror(self, children: [], displayStyle: .struct) }

    /// Compares in time that depends only on the lengths, not on where the strings differ.
    public func constantTimeEquals(_ other: String) -> Bool {
        let a = Array(value.utf8), b = Array(other.utf8)
        guard a.count == b.count else { return false }
        var diff: UInt8 = 0
        for i in 0..<a.count { diff |= a[i] ^ b[i] }
        return diff == 0
    }
}
