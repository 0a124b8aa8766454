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
    /// `forward`, `forward_stop`: the host as ssh names it (`ssh -G`: its HostKeyAlias or HostName, `:PORT` when
    /// not 22).
    public var host: String?
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

    public init(op: Operation, id: Int? = nil, account: String? = nil, minValid: Int? = nil,
                forceRefresh: Bool? = nil, interactive: Bool? = nil, idToken: Bool? = nil,
                browser: Bool? = nil, url: String? = nil, method: LoginMethodName? = nil,
                scopes: [String]? = nil, resource: String? = nil, since: Int? = nil, request: Int? = nil,
                client: String? = nil, before: Int? = nil, dpopMethod: String? = nil, dpopURL: String? = nil,
                dpopNonce: String? = nil, host: String? = nil, session: String? = nil, pid: Int? = nil,
                fingerprint: String? = nil, program: String? = nil, thisRun: Bool? = nil) {
        self.thisRun = thisRun
        self.program = program
        self.host = host
        self.session = session
        self.pid = pid
        self.fingerprint = fingerprint
        self.dpopMethod = dpopMethod
        self.dpopURL = dpopURL
        self.dpopNonce = dpopNonce
        self.v = WireProtocol.version
        self.id = id
        self.op = op.rawValue
        self.account = account
        self.minValid = minValid
        self.forceRefresh = forceRefresh
        self.interactive = interactive
        self.idToken = idToken
        self.browser = browser
        self.url = url
        self.method = method?.rawValue
        self.scopes = scopes
        self.resource = resource
        self.since = since
        self.request = request
        self.client = client
        self.before = before
    }

    enum CodingKeys: String, CodingKey {
        case v, id, op, account, minValid = "min_valid", forceRefresh = "force_refresh", interactive, idToken = "id_token",
             browser, url, method, scopes, resource, since, request, client, before, dpopMethod = "dpop_method",
             dpopURL = "dpop_url", dpopNonce = "dpop_nonce", host, session, pid, fingerprint, program,
             thisRun = "this_run"
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
    /// `consent_required` events: the pending request's id and what it is remembered under.
    public var request: Int?
    public var client: String?
    /// `forward_open` events: the session's id and the socket ssh forwards to the other host.
    public var session: String?
    public var socket: String?

    public static let loginStarted = "login_started"
    /// A forward session is open: `session`, `socket`.
    public static let forwardOpen = "forward_open"
    public static let deviceCode = "device_code"
    /// A `token` request waits for the user's Allow/Deny: `request` is the id `authctl approve` takes.
    public static let consentRequired = "consent_required"

    public init(type: String, url: String? = nil, redirectURI: String? = nil, browserOpened: Bool? = nil,
                browserError: String? = nil, timeoutSeconds: Int? = nil, userCode: String? = nil,
                verificationURI: String? = nil, verificationURIComplete: String? = nil, expiresIn: Int? = nil,
                interval: Int? = nil, request: Int? = nil, client: String? = nil, session: String? = nil,
                socket: String? = nil) {
        self.session = session
        self.socket = socket
        self.type = type
        self.url = url
        self.redirectURI = redirectURI
        self.browserOpened = browserOpened
        self.browserError = browserError
        self.timeoutSeconds = timeoutSeconds
        self.userCode = userCode
        self.verificationURI = verificationURI
        self.verificationURIComplete = verificationURIComplete
        self.expiresIn = expiresIn
        self.interval = interval
        self.request = request
        self.client = client
    }

    enum CodingKeys: String, CodingKey {
        case type, url, redirectURI = "redirect_uri", browserOpened = "browser_opened",
             browserError = "browser_error", timeoutSeconds = "timeout_s", userCode = "user_code",
             verificationURI = "verification_uri", verificationURIComplete = "verification_uri_complete",
             expiresIn = "expires_in", interval, request, client, session, socket
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
