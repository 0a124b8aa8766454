/// A private-use URI scheme redirect (RFC 8252 §7.1), for providers that do not allow loopback redirects: the
/// provider sends the browser to `com.example.app:/oauth2/callback/work?code=...`, the desktop hands that URI to the
/// program registered for the scheme (`authctl callback URI`, through a `.desktop` file), and the agent judges it
/// exactly like a loopback response. No listener is opened.
public struct PrivateUseRedirect: Sendable, Equatable {
    /// Lower-case, reverse-domain, with at least one period (RFC 8252 §7.1, §8.4).
    public let scheme: String
    /// Starts with a single `/`.
    public let path: String

    /// `scheme:/path`, as registered at the provider and sent as `redirect_uri`.
    public var uri: String { "\(scheme):\(path)" }

    /// Parses and checks `scheme:/path`: the scheme is a reverse domain name (`com.example.app`: labels of lower-case
    /// letters, digits and hyphens, at least two, never `http`/`https`); one slash after the colon (no authority:
    /// `scheme://` is refused); a path of unreserved characters and slashes; no query or fragment.
    public static func parse(_ text: String) -> Result<PrivateUseRedirect, EndpointRejection> {
        guard let colon = text.firstIndex(of: ":") else {
            return .failure(.init("must be scheme:/path (e.g. com.example.app:/oauth2/callback)"))
        }
        let scheme = String(text[..<colon])
        let path = String(text[text.index(after: colon)...])
        let lowerScheme = scheme.lowercased()
        if lowerScheme == "http" || lowerScheme == "https" {
            return .failure(.init("is a private-use scheme redirect and must not use http(s); use redirect_host/redirect_port for loopback"))
        }
        guard scheme == lowerScheme else { return .failure(.init("must use a lower-case scheme")) }
        let labels = scheme.split(separator: ".", omittingEmptySubsequences: false)
        guard labels.count >= 2 else {
            return .failure(.init("must use a reverse domain name as its scheme, with a period (e.g. com.example.app)"))
        }
        for label in labels {
            guard let first = label.unicodeScalars.first, let last = label.unicodeScalars.last,
                  ("a"..."z").contains(first), last != "-",
                  label.unicodeScalars.allSatisfy({ ("a"..."z").contains($0) || ("0"..."9").contains($0) || $0 == "-" })
            else {
                return .failure(.init("must use a reverse domain name as its scheme: labels of letters, digits and hyphens, each starting with a letter"))
            }
        }
        guard path.hasPrefix("/"), !path.hasPrefix("//") else {
            return .failure(.init("must have exactly one slash after the scheme (scheme:/path, RFC 8252 §7.1)"))
        }
        guard path.count <= 200, path.unicodeScalars.allSatisfy({
            ("a"..."z").contains($0) || ("A"..."Z").contains($0) || ("0"..."9").contains($0) || "-._~/".unicodeScalars.contains($0)
        }) else {
            return .failure(.init("must have a path of letters, digits and -._~/ only (no query or fragment)"))
        }
        return .success(PrivateUseRedirect(scheme: scheme, path: path))
    }

    /// Whether `url` is addressed to this redirect: same scheme and path, no authority. Used to find the account
    /// a handed-over URI belongs to; the full judgement is ``LoginSession/judge(pastedURL:redirectURI:)``.
    public func addresses(_ url: String) -> Bool {
        let prefix = uri
        guard url.hasPrefix(prefix) else { return false }
        let rest = url.dropFirst(prefix.count)
        return rest.isEmpty || rest.hasPrefix("?")
    }

    private init(scheme: String, path: String) {
        self.scheme = scheme
        self.path = path
    }
}
