import FoundationEssentials

/// One pending authorization request: the secrets it is sent with and the rules its response must meet. It is made
/// before the way back is opened (the loopback listener judges against it from its first request), so the redirect
/// URI, which the listener knows only once it is bound, is an argument of what needs it. Building the request and
/// judging a redirect are pure, so every rule is tested without a network.
public struct LoginSession: Sendable {
    public let issuer: URL
    public let state: Secret
    public let nonce: Secret?
    public let pkce: PKCE
    public let requiresIss: Bool
    /// The sign-in's DPoP key (RFC 9449): its thumbprint goes out as `dpop_jkt`, binding the code to it (§10).
    public let proofKey: DPoPKey?
    private let authorizationEndpoint: URL
    private let config: AccountConfig

    public init(account: AccountConfig, metadata: ProviderMetadata, pkce: PKCE = PKCE(),
                state: String = Randomness.token(bytes: 32), nonce: String = Randomness.token(bytes: 32),
                proofKey: DPoPKey? = nil) {
        self.proofKey = proofKey
        self.issuer = metadata.issuer
        self.state = Secret(state)
        self.nonce = account.wantsOpenID ? Secret(nonce) : nil
        self.pkce = pkce
        self.requiresIss = metadata.requiresIssInResponse
        self.authorizationEndpoint = metadata.authorizationEndpoint
        self.config = account
    }

    /// The authorization request's parameters for `redirectURI`, in order: what a pushed request (RFC 9126) sends in
    /// its body.
    public func parameters(redirectURI: String) -> [(String, String)] {
        queryItems(redirectURI: redirectURI).map { ($0.name, $0.value ?? "") }
    }

    /// The authorization request for `redirectURI` with every parameter in its query (what the browser gets without
    /// PAR).
    public func authorizationURL(redirectURI: String) -> URL {
        var components = URLComponents(url: authorizationEndpoint, resolvingAgainstBaseURL: false)!
        components.percentEncodedQueryItems = queryItems(redirectURI: redirectURI).map {
            URLQueryItem(name: $0.name, value: $0.value.map(LoginSession.formEncode))
        }
        return components.url!
    }

    private func queryItems(redirectURI: String) -> [URLQueryItem] {
        var items = URLComponents(url: authorizationEndpoint, resolvingAgainstBaseURL: false)!.queryItems ?? []
        items += [
            URLQueryItem(name: "response_type", value: "code"),
            URLQueryItem(name: "client_id", value: config.clientID),
            URLQueryItem(name: "redirect_uri", value: redirectURI),
            URLQueryItem(name: "scope", value: config.scopes.joined(separator: " ")),
            URLQueryItem(name: "state", value: state.reveal()),
            URLQueryItem(name: "code_challenge", value: pkce.challenge),
            URLQueryItem(name: "code_challenge_method", value: PKCE.method),
        ]
        if let nonce { items.append(URLQueryItem(name: "nonce", value: nonce.reveal())) }
        if let proofKey { items.append(URLQueryItem(name: "dpop_jkt", value: proofKey.thumbprint)) }
        for key in config.extraAuthParams.keys.sorted() where !AccountConfig.reservedAuthParams.contains(key) {
            items.append(URLQueryItem(name: key, value: config.extraAuthParams[key]))
        }
        if config.scopes.isEmpty { items.removeAll { $0.name == "scope" } }
        return items
    }

    /// The browser's URL for a pushed request (RFC 9126 §4): the authorization endpoint with `client_id` and
    /// `request_uri` only.
    public static func pushedAuthorizationURL(_ endpoint: URL, clientID: String, requestURI: String) -> URL {
        var components = URLComponents(url: endpoint, resolvingAgainstBaseURL: false)!
        var items = components.percentEncodedQueryItems ?? []
        items += [URLQueryItem(name: "client_id", value: formEncode(clientID)),
                  URLQueryItem(name: "request_uri", value: formEncode(requestURI))]
        components.percentEncodedQueryItems = items
        return components.url!
    }

    /// What a redirect that reached the listener amounts to.
    public enum Verdict: Sendable, Equatable {
        /// A valid response: exchange this code.
        case code(Secret)
        /// The server (or user) refused, and the response is genuine (valid state).
        case denied(error: String, description: String?)
        /// Not a valid response for this request; the login keeps waiting for the real one.
        case rejected(reason: String)
    }

    /// Judges the query string of a request that arrived on the exact redirect path.
    /// State is checked first, in constant time; an `error=` response counts only with a valid state (SECURITY.md 9).
    public func judge(query: String?) -> Verdict {
        let params = LoginSession.parseQuery(query ?? "")
        guard let stateValues = params["state"], stateValues.count == 1 else {
            return .rejected(reason: "missing or repeated state")
        }
        guard state.constantTimeEquals(stateValues[0]) else { return .rejected(reason: "state does not match") }
        if requiresIss {
            guard let iss = params["iss"], iss.count == 1 else { return .rejected(reason: "missing iss (RFC 9207)") }
            guard ProviderMetadata.sameIssuer(iss[0], issuer.absoluteString) else {
                return .rejected(reason: "iss does not match the issuer (RFC 9207)")
            }
        } else if let iss = params["iss"], iss.count != 1 || !ProviderMetadata.sameIssuer(iss[0], issuer.absoluteString) {
            return .rejected(reason: "iss does not match the issuer (RFC 9207)")
        }
        if let error = params["error"]?.first {
            return .denied(error: LoginSession.printable(error), description: params["error_description"]?.first.map(LoginSession.printable))
        }
        guard let codes = params["code"], codes.count == 1, !codes[0].isEmpty else {
            return .rejected(reason: "missing or repeated code")
        }
        return .code(Secret(codes[0]))
    }

    /// The longest pasted redirect URL accepted (manual paste, `authctl login --no-browser`).
    public static let maxPastedURLBytes = 8 * 1024

    /// Judges a final redirect URL that a person pasted (manual paste) or the desktop handed over (a private-use
    /// scheme, `authctl callback`): it must be this request's redirect URI exactly (scheme, host literal, port, path;
    /// for a private-use scheme no authority at all; no user info, no fragment), and then its query is judged like a
    /// response that reached the loopback listener (SECURITY.md 3, 7, 8, 9). Reasons never contain the URL.
    public func judge(pastedURL text: String, redirectURI: String) -> Verdict {
        let trimmed = text.trimmingWhitespace
        guard !trimmed.isEmpty else { return .rejected(reason: "the pasted URL is empty") }
        guard trimmed.utf8.count <= LoginSession.maxPastedURLBytes else {
            return .rejected(reason: "the pasted URL is longer than \(LoginSession.maxPastedURLBytes) bytes")
        }
        guard trimmed.unicodeScalars.allSatisfy({ $0.value > 0x20 && $0.value < 0x7F }) else {
            return .rejected(reason: "the pasted URL contains spaces or characters that are not printable ASCII")
        }
        guard let pasted = URLComponents(string: trimmed), let expected = URLComponents(string: redirectURI) else {
            return .rejected(reason: "the pasted text is not a URL")
        }
        guard pasted.scheme?.lowercased() == expected.scheme?.lowercased() else {
            return .rejected(reason: "the pasted URL's scheme is not the redirect URI's (\(expected.scheme ?? "?"))")
        }
        guard pasted.percentEncodedUser == nil, pasted.percentEncodedPassword == nil else {
            return .rejected(reason: "the pasted URL has user information")
        }
        if expected.percentEncodedHost == nil {
            // A private-use scheme redirect (RFC 8252 §7.1): `scheme:/path`, never an authority.
            guard pasted.percentEncodedHost == nil, pasted.port == nil else {
                return .rejected(reason: "the URL has an authority (//host); the redirect URI is \(expected.scheme ?? "?"):/path")
            }
        } else {
            guard let host = pasted.percentEncodedHost, host == expected.percentEncodedHost else {
                return .rejected(reason: "the pasted URL's host is not the redirect URI's (\(expected.percentEncodedHost ?? "?"))")
            }
            guard pasted.port == expected.port, pasted.port != nil else {
                return .rejected(reason: "the pasted URL's port is not the redirect URI's (\(expected.port.map(String.init) ?? "?"))")
            }
        }
        guard pasted.percentEncodedPath == expected.percentEncodedPath else {
            return .rejected(reason: "the pasted URL's path is not the redirect path (\(expected.percentEncodedPath))")
        }
        guard pasted.percentEncodedFragment == nil else { return .rejected(reason: "the pasted URL has a fragment") }
        return judge(query: pasted.percentEncodedQuery)
    }

    /// Application/x-www-form-urlencoded value encoding (RFC 6749 Appendix B): only unreserved characters stay.
    public static func formEncode(_ value: String) -> String {
        let hex = Array("0123456789ABCDEF".utf8)
        var encoded: [UInt8] = []
        for byte in value.utf8 {
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                 UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"):
                encoded.append(byte)
            default:
                encoded += [UInt8(ascii: "%"), hex[Int(byte >> 4)], hex[Int(byte & 0x0F)]]
            }
        }
        return String(decoding: encoded, as: UTF8.self)
    }

    public static func parseQuery(_ query: String) -> [String: [String]] {
        var result: [String: [String]] = [:]
        for pair in query.split(separator: "&", omittingEmptySubsequences: true) {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            let decode = { (s: Substring) in (percentDecoded(String(s.map { $0 == "+" ? " " : $0 }))) ?? "" }
            let key = decode(parts[0])
            let value = parts.count > 1 ? decode(parts[1]) : ""
            result[key, default: []].append(value)
        }
        return result
    }

    /// Foundation's `removingPercentEncoding`: nil for a malformed escape or for bytes that are not UTF-8; a leading
    /// byte order mark (U+FEFF, literal or escaped) is dropped.
    static func percentDecoded(_ text: String) -> String? {
        func hexValue(_ byte: UInt8) -> UInt8? {
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): return byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): return byte - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): return byte - UInt8(ascii: "A") + 10
            default: return nil
            }
        }
        var bytes: [UInt8] = []
        var iterator = text.utf8.makeIterator()
        while let byte = iterator.next() {
            guard byte == UInt8(ascii: "%") else {
                bytes.append(byte)
                continue
            }
            guard let high = iterator.next().flatMap(hexValue), let low = iterator.next().flatMap(hexValue) else { return nil }
            bytes.append(high << 4 | low)
        }
        if bytes.starts(with: [0xEF, 0xBB, 0xBF]) { bytes.removeFirst(3) }
        return String(validating: bytes, as: UTF8.self)
    }

    /// Text from the network shown to people: printable ASCII only, bounded.
    static func printable(_ text: String) -> String {
        String(String.UnicodeScalarView(text.unicodeScalars.filter { $0.value >= 0x20 && $0.value < 0x7F }).prefix(200))
    }
}
