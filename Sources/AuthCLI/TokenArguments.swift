import AgentIPC

/// What `authctl token` was asked for: filled by ArgumentParser's `Token` command, or by ``parse(_:)`` on the fast
/// path, and run by the same code either way, so both paths print the same bytes and exit with the same codes.
public struct TokenArguments: Equatable, Sendable {
    public var account: String
    public var socket: String?
    public var minValid: Int
    public var refresh: Bool
    public var interactive: Bool
    public var idToken: Bool
    public var header: Bool
    public var json: Bool
    public var scopes: [String]
    public var resource: String?
    /// `--timeout`: seconds to wait for the agent's answer (0: no limit); nil: the verb's default.
    public var timeout: Int?
    /// `--method`, `--url`, `--dpop-nonce`: the request a DPoP proof is for (RFC 9449 §7).
    public var method: String?
    public var url: String?
    public var dpopNonce: String?
    /// `--grant`: ask as this grant, through the agent's socket (a hook on the desktop serving a sandbox).
    public var grant: String?

    public init(account: String, socket: String? = nil, minValid: Int = 0, refresh: Bool = false,
                interactive: Bool = false, idToken: Bool = false, header: Bool = false, json: Bool = false,
                scopes: [String] = [], resource: String? = nil, timeout: Int? = nil, method: String? = nil,
                url: String? = nil, dpopNonce: String? = nil, grant: String? = nil) {
        self.grant = grant
        self.method = method
        self.url = url
        self.dpopNonce = dpopNonce
        self.account = account
        self.socket = socket
        self.minValid = minValid
        self.refresh = refresh
        self.interactive = interactive
        self.idToken = idToken
        self.header = header
        self.json = json
        self.scopes = scopes
        self.resource = resource
        self.timeout = timeout
    }

    /// The request line's content. Options left at their defaults are left out (not sent as `false`): the agent
    /// reads an absent option as its default, and the common line stays short.
    public func wireRequest(method: LoginMethodName?) -> WireRequest {
        WireRequest(op: .token) { request in
            // Each optional member from a non-optional value: copying a `String?` into the request had the runtime
            // look up `String?`'s metadata by its mangled name, 8,000 instructions of every `authctl token`.
            request.account = account; request.minValid = minValid; request.method = method?.rawValue
            if refresh { request.forceRefresh = true }
            if interactive { request.interactive = true }
            if idToken { request.idToken = true }
            if let resource { request.resource = resource }
            if !scopes.isEmpty { request.scopes = scopes.flatMap { $0.split(separator: " ").map(String.init) } }
            if let url { request.dpopMethod = self.method ?? "GET"; request.dpopURL = url; request.dpopNonce = dpopNonce }
            if let grant { request.grant = grant }
        }
    }

    /// Why these options do not go together, if they do not (ArgumentParser's `validate()` and the fast path share
    /// it).
    public var conflict: String? {
        if header && idToken { return "--header and --id-token do not go together" }
        if url == nil && (method != nil || dpopNonce != nil) { return "--method and --dpop-nonce need --url" }
        if url != nil && idToken { return "--url (a DPoP proof) and --id-token do not go together" }
        if let grant, !SocketPath.isGrantName(grant) { return "--grant takes a grant's name (letters, digits, '-', '_', '.')" }
        if grant != nil && interactive { return "--grant and --interactive do not go together: a grant never signs in" }
        return nil
    }

    private static let scanner = ArgumentScanner(
        flags: ["refresh", "interactive", "id-token", "header", "json"],
        options: ["socket", "min-valid", "resource", "timeout", "method", "url", "dpop-nonce", "grant"],
        repeatable: ["scope"])

    /// The arguments after `token`, when they are a form ArgumentParser would accept and read the same way;
    /// nil for everything else (help, usage errors, anything unusual), which then goes to ArgumentParser.
    public static func parse(_ arguments: [String]) -> TokenArguments? {
        guard let scan = scanner.scan(arguments), let account = scan.positional else { return nil }
        guard let minValid = scan.count("min-valid"), let timeout = scan.count("timeout") else { return nil }
        let result = TokenArguments(
            account: account, socket: scan.value("socket"), minValid: minValid ?? 0,
            refresh: scan.flags.contains("refresh"), interactive: scan.flags.contains("interactive"),
            idToken: scan.flags.contains("id-token"), header: scan.flags.contains("header"),
            json: scan.flags.contains("json"), scopes: scan.values("scope"), resource: scan.value("resource"),
            timeout: timeout, method: scan.value("method"), url: scan.value("url"), dpopNonce: scan.value("dpop-nonce"),
            grant: scan.value("grant"))
        // Token.validate()'s refusals are ArgumentParser's to word.
        guard result.conflict == nil else { return nil }
        return result
    }
}
