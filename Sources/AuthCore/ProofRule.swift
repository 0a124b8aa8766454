import FoundationEssentials

/// Where a grant's DPoP proofs may be used (`authctl grant --dpop-url "[METHOD[,METHOD...] ]URL-PREFIX"`): the agent
/// signs a proof for a grant's caller only for a request these rules allow, so a DPoP-bound token the workload holds
/// is useless anywhere else (a resource server that checks the proof refuses the token without one). Pure.
///
/// A prefix matches the proof's `htu` (scheme, host, port, path; RFC 9449 §4.2) on a path-segment boundary:
/// `https://api.example.com/v1` allows `/v1` and `/v1/x`, not `/v10`. A target whose path a server could read as
/// another one (dot segments, an encoded `/` or `\`, a backslash) or that carries user information is refused by
/// every rule, so that no spelling escapes the prefix.
public struct ProofRule: Sendable, Equatable, CustomStringConvertible {
    /// Upper-case methods; empty: any method.
    public let methods: [String]
    let scheme: String
    let host: String
    let port: Int
    /// The path prefix, `/` at least.
    let path: String

    /// Parses `[METHOD[,METHOD...] ]URL-PREFIX`; the reason in words when it is not one.
    public init(_ text: String) throws(AuthError) {
        let trimmed = text.trimmingBlanks
        var methods: [String] = []
        var urlText = trimmed
        if let space = trimmed.firstIndex(of: " ") {
            urlText = trimmed[trimmed.index(after: space)...].trimmingBlanks
            let tchar = Set("!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
            for method in trimmed[..<space].split(separator: ",", omittingEmptySubsequences: false) {
                guard !method.isEmpty, method.count <= 32, method.allSatisfy({ tchar.contains($0) }) else {
                    throw AuthError(.invalidTarget, "'\(String(text.prefix(80)))': methods are HTTP methods separated by commas, then a space and the URL")
                }
                methods.append(method.uppercased())
            }
        }
        guard urlText.utf8.count <= 2048, let parts = URLComponents(string: urlText),
              let scheme = parts.scheme?.lowercased(), scheme == "https" || scheme == "http",
              let host = parts.host?.lowercased(), !host.isEmpty else {
            throw AuthError(.invalidTarget, "'\(String(text.prefix(80)))' is not an http or https URL prefix")
        }
        guard parts.user == nil, parts.password == nil, parts.query == nil, parts.fragment == nil else {
            throw AuthError(.invalidTarget, "'\(String(text.prefix(80)))': a URL prefix has no user, query or fragment")
        }
        let path = parts.percentEncodedPath.isEmpty ? "/" : parts.percentEncodedPath
        guard ProofRule.isPlain(path) else {
            throw AuthError(.invalidTarget, "'\(String(text.prefix(80)))': the path must not hold '.' or '..' segments, an encoded '/' or '\\', or a backslash")
        }
        self.methods = methods
        self.scheme = scheme
        self.host = host
        self.port = parts.port ?? (scheme == "https" ? 443 : 80)
        self.path = path
    }

    /// Whether a proof for `method` and `url` is allowed by this rule.
    public func allows(method: String, url: URL) -> Bool {
        guard methods.isEmpty || methods.contains(method.uppercased()),
              let parts = URLComponents(url: url, resolvingAgainstBaseURL: false),
              parts.user == nil, parts.password == nil,
              parts.scheme?.lowercased() == scheme, parts.host?.lowercased() == host,
              (parts.port ?? (scheme == "https" ? 443 : 80)) == port else { return false }
        let target = parts.percentEncodedPath.isEmpty ? "/" : parts.percentEncodedPath
        guard ProofRule.isPlain(target), target.hasPrefix(path) else { return false }
        return path.hasSuffix("/") || target.count == path.count
            || target[target.index(target.startIndex, offsetBy: path.count)] == "/"
    }

    /// Whether any of `rules` allows a proof for `method` and `url`.
    public static func allow(_ rules: [ProofRule], method: String, url: URL) -> Bool {
        rules.contains { $0.allows(method: method, url: url) }
    }

    /// A path a server reads as itself: no dot segments, no encoded `/` or `\`, no backslash.
    static func isPlain(_ path: String) -> Bool {
        let lowered = path.lowercased()
        guard !lowered.contains("%2f"), !lowered.contains("%5c"), !lowered.contains("%2e"), !path.contains("\\") else {
            return false
        }
        return !path.split(separator: "/", omittingEmptySubsequences: false).contains { $0 == "." || $0 == ".." }
    }

    public var description: String {
        let defaultPort = scheme == "https" ? 443 : 80
        let url = "\(scheme)://\(host)\(port == defaultPort ? "" : ":\(port)")\(path)"
        return methods.isEmpty ? url : "\(methods.joined(separator: ",")) \(url)"
    }
}
