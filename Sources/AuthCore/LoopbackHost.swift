/// The loopback literal the redirect listener binds and the redirect URI names (RFC 8252 §7.3, §8.3): never
/// `localhost` (which may resolve to the other family, where another user can bind the same port), never a wildcard.
public enum LoopbackHost: String, Sendable, Equatable, CaseIterable {
    case ipv4 = "127.0.0.1"
    case ipv6 = "[::1]"

    /// The address to bind, without brackets.
    public var address: String {
        switch self {
        case .ipv4: "127.0.0.1"
        case .ipv6: "::1"
        }
    }

    /// As it appears in the redirect URI and the `Host` header.
    public var uriLiteral: String { rawValue }

    /// Tried when this literal cannot be bound at all (the host has no loopback of this family).
    public var fallback: LoopbackHost { self == .ipv4 ? .ipv6 : .ipv4 }
}
