import FoundationEssentials

/// Which URLs the agent will talk to or hand to a browser: `https` anywhere, or plain `http` only on a loopback
/// literal (for local test servers). Anything else (other schemes, `localhost`, a leading `-`, userinfo) is refused.
public enum EndpointPolicy {
    public static let loopbackLiterals: Set<String> = ["127.0.0.1", "::1", "[::1]"]

    /// Returns the parsed URL or a human explanation of why it is refused.
    public static func validate(_ text: String) -> Result<URL, EndpointRejection> {
        if text.hasPrefix("-") { return .failure(.init("must not start with '-'")) }
        if text.contains(where: { $0.isWhitespace || $0.isNewline }) { return .failure(.init("must not contain spaces")) }
        guard let components = URLComponents(string: text), let scheme = components.scheme?.lowercased() else {
            return .failure(.init("is not an absolute URL"))
        }
        guard scheme == "https" || scheme == "http" else { return .failure(.init("must use https, not '\(scheme)'")) }
        guard let host = components.host, !host.isEmpty, let url = components.url else {
            return .failure(.init("is not an absolute URL"))
        }
        if components.user != nil || components.password != nil {
            return .failure(.init("must not contain a user name or password"))
        }
        if components.fragment != nil { return .failure(.init("must not contain a fragment")) }
        switch scheme {
        case "https": return .success(url)
        case "http" where loopbackLiterals.contains(host): return .success(url)
        case "http": return .failure(.init("must use https (plain http is allowed only for 127.0.0.1 or [::1])"))
        default: return .failure(.init("must use https, not '\(scheme)'"))
        }
    }
}

public struct EndpointRejection: Error, Sendable, Equatable {
    public let reason: String
    public init(_ reason: String) { self.reason = reason }
}
