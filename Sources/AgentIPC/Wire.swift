import FoundationEssentials

/// The socket protocol, version 1 (docs/PROTOCOL.md). Newline-delimited JSON: one request object per line, one or
/// more reply lines per request (zero or more `event` lines, then exactly one with `result` or `error`), each
/// echoing the request's `id`. Versioned independently of the domain types, so AgentIPC does not import AuthCore.
public enum WireProtocol {
    public static let version = 1
    /// No line, in either direction, may exceed this many bytes (newline excluded).
    public static let maxMessageBytes = 64 * 1024
    /// `token`'s `min_valid`, in seconds: anything else is `bad_request`, with the range in its message.
    public static let minValidRange = 0...(366 * 24 * 3600)
}

public enum Operation: String, Codable, Sendable, CaseIterable {
    case ping, status, accounts, token, login, logout
    /// Manual paste: hands the final redirect URL of a pending sign-in to the agent.
    case loginCallback = "login_callback"
    /// `authctl doctor`: checks each account's authorization server, the keyring and the browser.
    case diagnose
    /// The audit trail: tokens handed out and requests refused (`since`, `account` filter).
    case audit
    /// Requests waiting for the user's Allow/Deny (`confirm = "first-use"`).
    case pending
    /// Answers a pending request (`request` is its id); only from a caller with a controlling terminal.
    case approve, deny
    /// Drops remembered Allow/Deny decisions (`account`, `client` narrow it); only from a terminal.
    case forget
    /// Re-reads the configuration file and puts it in force, keeping sign-ins and cached tokens; an invalid file is
    /// refused with `config_error` and the configuration in force stays (SIGHUP does the same).
    case reload
    /// `authctl forward`: opens a forward session for `host` (an event line names its socket), open until the client
    /// goes away or `forward_stop`.
    case forward
    /// The ssh process (`pid`, a child of the caller) a forward `session` serves.
    case forwardSSH = "forward_ssh"
    /// ssh's `KnownHostsCommand`: the `fingerprint` of the host key ssh was shown for forward `session`.
    case forwardHostKey = "forward_host_key"
    /// Ends the forward sessions for `host` now.
    case forwardStop = "forward_stop"
    /// `authctl grant`: makes grant `grant` for `accounts` (a socket of its own), lasting `lifetime` seconds and/or
    /// while process `pid` runs.
    case grant
    /// Ends grant `grant` now: its socket and its connections close.
    case grantRevoke = "grant_revoke"
    /// `authctl lock` / `authctl unlock`: what locks with the session is refused (or served again), for screen
    /// lockers that do not set logind's hint.
    case lock, unlock
}

public struct WireRequest: Codable, Sendable, Equatable {
    public var v: Int
    public var id: Int?
    public var op: String
    public var account: String?
    /// `token`: the token must stay valid at least this many seconds.
    public var minValid: Int?
    /// `token`: refresh even if the cached token is fresh.
    public var forceRefresh: Bool?
    /// `token`: when no sign-in is stored, start (or join) a browser sign-in and answer when it completes.
    public var interactive: Bool?
    /// `token`: include the OIDC ID token in the result.
    public var idToken: Bool?
    /// `login`: start the browser (default true); false for manual paste (the URL is only shown).
    public var browser: Bool?
    /// `login_callback`: the final redirect URL the user pasted.
    public var url: String?
    /// `login` and interactive `token`: `redirect` (default), `device` or `prefer_device` (``LoginMethodName``).
    public var method: String?
    /// `token`: a subset of the account's scopes (a separately cached token); absent means the account's.
    public var scopes: [String]?
    /// `token`: an RFC 8707 resource (absolute URI, no fragment) the token is for.
    public var resource: String?
    /// `audit`: only records at or after this Unix time.
    public var since: Int?
    /// `audit`: only records older than this cursor (a previous page's ``AuditResult/next``).
    public var before: Int?
    /// `approve`, `deny`: the pending request's id (``PendingConsent/id``).
    public var request: Int?
    /// `forget`: only decisions for this client (an executable path or `flatpak:APP`).
    public var client: String?
    /// `token`: the request a DPoP proof is wanted for (RFC 9449 §7): its HTTP method and URL, and the resource
    /// server's nonce when it asked for one. The agent fills `iat` and `jti` itself.
    public var dpopMethod: String?
    public var dpopURL: String?
    public var dpopNonce: String?
    /// `forward`: the host as ssh checks its key (`ssh -G`: its HostKeyAlias or HostName, `:PORT` when not 22).
    /// `forward_stop`: that name, or the one the person typed (``alias``).
    public var host: String?
    /// `forward`: the name the person typed for the host (`ssh -G`'s `host`: a `Host` alias), when it is not `host`.
    /// An `ssh:` entry naming either serves the host.
    public var alias: String?
    /// `forward_ssh`, `forward_host_key`: the forward session (the `forward_open` event's `session`).
    public var session: String?
    /// `forward_ssh`: the ssh process's pid.
    public var pid: Int?
    /// `forward_host_key`: the host key's SHA256 fingerprint as ssh prints it.
    public var fingerprint: String?
    /// Any request through a forward: the program on the other host that asks, as authctl there says (not verified;
    /// shown to the user as said by the host, ignored from local callers).
    public var program: String?
    /// `approve`: allow for this run only (the caller's Flatpak instance or ssh session), in memory, not remembered.
    public var thisRun: Bool?
    /// `grant`, `grant_revoke`: the grant's name. `token` from a program of the desktop: ask as this grant (served
    /// as its socket's callers are), through the agent's own socket.
    public var grant: String?
    /// `grant`: the accounts it serves.
    public var accounts: [String]?
    /// `grant`: how many seconds it lasts (absent: until revoked, or while `pid` runs).
    public var lifetime: Int?
    /// `grant`: where its DPoP proofs may be used, each `[METHOD[,METHOD...] ]URL-PREFIX` (absent: anywhere).
    public var dpopURLs: [String]?
    /// `grant`: not served while the user's session is locked.
    public var lockWithSession: Bool?
    /// `grant`: the longest a token handed through it stays valid, in seconds (ended at the server at that age).
    public var maxTTL: Int?

    /// A request for `op`, its members set by `members`: `WireRequest(op: .token) { $0.account = "work" }`.
    public init(op: Operation, id: Int? = nil, _ members: (inout WireRequest) -> Void = { _ in }) {
        self.v = WireProtocol.version
        self.id = id
        self.op = op.rawValue
        members(&self)
    }

    /// The request's one list of its members after `v`, `id` and `op`: each one's wire name and where it is kept, in
    /// the order ``line`` writes them. The writer, the agent's reader (``decode(line:)``) and Codable all go through
    /// it, so a new member is a property above and a line here. Closures rather than key paths: a key path is
    /// instantiated from mangled type names at its first use, which would cost `authctl` more than its whole request.
    static let members: [(name: String, kind: Member)] = [
        ("account", .string { $1(&$0.account) }), ("min_valid", .int { $1(&$0.minValid) }),
        ("force_refresh", .bool { $1(&$0.forceRefresh) }), ("interactive", .bool { $1(&$0.interactive) }),
        ("id_token", .bool { $1(&$0.idToken) }), ("browser", .bool { $1(&$0.browser) }), ("url", .string { $1(&$0.url) }),
        ("method", .string { $1(&$0.method) }), ("scopes", .strings { $1(&$0.scopes) }),
        ("resource", .string { $1(&$0.resource) }), ("since", .int { $1(&$0.since) }), ("before", .int { $1(&$0.before) }),
        ("request", .int { $1(&$0.request) }), ("client", .string { $1(&$0.client) }),
        ("dpop_method", .string { $1(&$0.dpopMethod) }), ("dpop_url", .string { $1(&$0.dpopURL) }),
        ("dpop_nonce", .string { $1(&$0.dpopNonce) }), ("host", .string { $1(&$0.host) }),
        ("session", .string { $1(&$0.session) }), ("pid", .int { $1(&$0.pid) }),
        ("fingerprint", .string { $1(&$0.fingerprint) }), ("program", .string { $1(&$0.program) }),
        ("this_run", .bool { $1(&$0.thisRun) }), ("alias", .string { $1(&$0.alias) }),
        ("grant", .string { $1(&$0.grant) }), ("accounts", .strings { $1(&$0.accounts) }),
        ("lifetime", .int { $1(&$0.lifetime) }), ("dpop_urls", .strings { $1(&$0.dpopURLs) }),
        ("lock_with_session", .bool { $1(&$0.lockWithSession) }), ("max_ttl", .int { $1(&$0.maxTTL) }),
    ]

    /// A member's JSON type and its place in the request: the closure hands its argument the member, in place.
    enum Member: Sendable {
        typealias Slot<Value> = @Sendable (inout WireRequest, (inout Value?) -> Void) -> Void
        case string(Slot<String>), int(Slot<Int>), bool(Slot<Bool>), strings(Slot<[String]>)
    }

    /// Codable reads and writes the same ``members``: the tests hold the strict reader and the writer to it.
    private struct Key: CodingKey {
        let stringValue: String
        init(stringValue: String) { self.stringValue = stringValue }
        var intValue: Int? { nil }
        init?(intValue: Int) { nil }
    }

    public init(from decoder: any Decoder) throws {
        let json = try decoder.container(keyedBy: Key.self)
        self.init(op: .ping, id: try json.decodeIfPresent(Int.self, forKey: Key(stringValue: "id")))
        v = try json.decode(Int.self, forKey: Key(stringValue: "v"))
        op = try json.decode(String.self, forKey: Key(stringValue: "op"))
        for (name, kind) in WireRequest.members {
            let key = Key(stringValue: name)
            switch kind {
            case .string(let slot): let value = try json.decodeIfPresent(String.self, forKey: key); slot(&self) { $0 = value }
            case .int(let slot): let value = try json.decodeIfPresent(Int.self, forKey: key); slot(&self) { $0 = value }
            case .bool(let slot): let value = try json.decodeIfPresent(Bool.self, forKey: key); slot(&self) { $0 = value }
            case .strings(let slot): let value = try json.decodeIfPresent([String].self, forKey: key); slot(&self) { $0 = value }
            }
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var json = encoder.container(keyedBy: Key.self)
        try json.encode(v, forKey: Key(stringValue: "v"))
        try json.encodeIfPresent(id, forKey: Key(stringValue: "id"))
        try json.encode(op, forKey: Key(stringValue: "op"))
        var request = self
        for (name, kind) in WireRequest.members {
            let key = Key(stringValue: name)
            switch kind {
            case .string(let slot): var value: String?; slot(&request) { value = $0 }; try json.encodeIfPresent(value, forKey: key)
            case .int(let slot): var value: Int?; slot(&request) { value = $0 }; try json.encodeIfPresent(value, forKey: key)
            case .bool(let slot): var value: Bool?; slot(&request) { value = $0 }; try json.encodeIfPresent(value, forKey: key)
            case .strings(let slot): var value: [String]?; slot(&request) { value = $0 }; try json.encodeIfPresent(value, forKey: key)
            }
        }
    }
}

/// The sign-in methods a `login` request may ask for (docs/PROTOCOL.md).
public enum LoginMethodName: String, Codable, Sendable, CaseIterable {
    /// Browser and redirect; falls back to the device grant when no browser starts and the server offers it.
    case redirect
    /// The device authorization grant (RFC 8628) only.
    case device
    /// The device grant when the server offers it, else `redirect` (headless and SSH sessions).
    case preferDevice = "prefer_device"
}

/// Stable error codes. Clients switch on these; messages are for people and may change.
public enum ErrorCode: String, Codable, Sendable, CaseIterable {
    // Protocol
    case badRequest = "bad_request"
    case unsupportedVersion = "unsupported_version"
    case unknownOp = "unknown_op"
    case messageTooLarge = "message_too_large"
    case permissionDenied = "permission_denied"
    // Accounts and sign-in
    case unknownAccount = "unknown_account"
    /// `token` asked as a grant (`grant`) that is not served: revoked, ended, or never made.
    case unknownGrant = "unknown_grant"
    case loginRequired = "login_required"
    case loginTimeout = "login_timeout"
    case loginCancelled = "login_cancelled"
    case accessDenied = "access_denied"
    case loginFailed = "login_failed"
    case deviceGrantUnsupported = "device_grant_unsupported"
    case loginRateLimited = "login_rate_limited"
    case minValidUnsatisfiable = "min_valid_unsatisfiable"
    /// `token` asked for a scope the account does not configure (or the server refused it).
    case invalidScope = "invalid_scope"
    /// `token` asked for a `resource` that is not an absolute URI without fragment (or the server refused it).
    case invalidTarget = "invalid_target"
    // Keyring
    case keyringLocked = "keyring_locked"
    case keyringUnavailable = "keyring_unavailable"
    case keyringError = "keyring_error"
    // Authorization server
    case serverUnreachable = "server_unreachable"
    case serverError = "server_error"
    case tlsError = "tls_error"
    case invalidClient = "invalid_client"
    case invalidTokenResponse = "invalid_token_response"
    case invalidMetadata = "invalid_metadata"
    case issuerMismatch = "issuer_mismatch"
    case pkceUnsupported = "pkce_unsupported"
    case insecureEndpoint = "insecure_endpoint"
    case invalidIDToken = "invalid_id_token"
    /// The server refused the agent's DPoP proof, or does not offer DPoP to an account that requires it.
    case dpopRefused = "dpop_refused"
    /// The TPM that holds the account's DPoP key (`dpop_key = "tpm"`) did not answer; the sign-in is kept.
    case tpmUnavailable = "tpm_unavailable"
    // Agent
    case invalidConfig = "invalid_config"
    /// The agent's configuration file is invalid (message: `file:line: what to fix`). Every request gets it until
    /// the file is fixed; the agent re-reads the file on the next request after it changes.
    case configError = "config_error"
    /// The agent is at its connection cap and every connection has a request in flight: this new connection is
    /// closed after this line (`retry_after` says when to try again). SECURITY.md 22.
    case agentBusy = "agent_busy"
    case internalError = "internal_error"
}

public struct WireError: Codable, Sendable, Equatable, Error {
    /// Kept as a string so a newer agent's unknown code still decodes; see ``knownCode``.
    public var code: String
    public var message: String
    public var retryAfter: Int?
    /// With the keyring codes: the program that answers as the Secret Service (its executable's path, or its process
    /// name), when the agent could tell, and what to do, in its words.
    public var keyringService: String?
    public var keyringAdvice: String?

    public init(_ code: ErrorCode, _ message: String, retryAfter: Int? = nil, keyringService: String? = nil,
                keyringAdvice: String? = nil) {
        self.code = code.rawValue
        self.message = message
        self.retryAfter = retryAfter
        self.keyringService = keyringService
        self.keyringAdvice = keyringAdvice
    }

    public var knownCode: ErrorCode? { ErrorCode(rawValue: code) }

    enum CodingKeys: String, CodingKey {
        case code, message, retryAfter = "retry_after", keyringService = "keyring_service", keyringAdvice = "keyring_advice"
    }
}

/// A progress line sent before the final reply (today only by `login` and interactive `token`).
public struct WireEvent: Codable, Sendable, Equatable {
    public var type: String
    public var url: String?
    public var redirectURI: String?
    public var browserOpened: Bool?
    public var browserError: String?
    public var timeoutSeconds: Int?
    /// `device_code` events (RFC 8628 §3.3): what the person opens and types, and how often the agent polls.
    public var userCode: String?
    public var verificationURI: String?
    public var verificationURIComplete: String?
    public var expiresIn: Int?
    public var interval: Int?
    /// `consent_required` events: the pending request's id and what it is remembered under, and for a host allowed
    /// before under another host key, that key (``PendingConsent/previousHostKey``).
    public var request: Int?
    public var client: String?
    public var previousHostKey: String?
    /// `forward_open` events: the session's id and the socket ssh forwards to the other host.
    public var session: String?
    public var socket: String?

    public static let loginStarted = "login_started"
    /// A forward session is open: `session`, `socket`.
    public static let forwardOpen = "forward_open"
    public static let deviceCode = "device_code"
    /// A `token` request waits for the user's Allow/Deny: `request` is the id `authctl approve` takes.
    public static let consentRequired = "consent_required"

    /// An event of `type`, its members set by `members` (as ``WireRequest/init(op:id:_:)``).
    public init(type: String, _ members: (inout WireEvent) -> Void = { _ in }) {
        self.type = type
        members(&self)
    }

    enum CodingKeys: String, CodingKey {
        case type, url, redirectURI = "redirect_uri", browserOpened = "browser_opened",
             browserError = "browser_error", timeoutSeconds = "timeout_s", userCode = "user_code",
             verificationURI = "verification_uri", verificationURIComplete = "verification_uri_complete",
             expiresIn = "expires_in", interval, request, client, previousHostKey = "previous_host_key", session, socket
    }
}

/// One reply line. Exactly one of `result`, `error`, `event` is present.
public struct WireResponse<Result: Codable & Sendable>: Codable, Sendable {
    public var v: Int
    public var id: Int?
    public var result: Result?
    public var error: WireError?
    public var event: WireEvent?

    public init(id: Int?, result: Result? = nil, error: WireError? = nil, event: WireEvent? = nil) {
        self.v = WireProtocol.version
        self.id = id
        self.result = result
        self.error = error
        self.event = event
    }
}

/// For reply lines that carry no result (errors and events).
public struct NoResult: Codable, Sendable, Equatable {}
