import FoundationEssentials

/// `diagnose`: the agent's own checks for `authctl doctor` (docs/PROTOCOL.md). Times are Unix seconds.
public struct DiagnoseResult: Codable, Sendable, Equatable {
    public struct Browser: Codable, Sendable, Equatable {
        /// The program the agent would start (absolute path), or null.
        public var program: String?
        /// Where the name came from: `BROWSER` or `xdg-open`.
        public var source: String?
        /// Why none was found.
        public var problem: String?
        /// The display the browser opens on, from `display_source`'s environment (`user manager` under systemd,
        /// `agent` otherwise; absent when the portal opens it).
        public var display: String?
        public var waylandDisplay: String?
        public var displaySource: String?
        public init(program: String?, source: String?, problem: String?, display: String? = nil,
                    waylandDisplay: String? = nil, displaySource: String? = nil) {
            self.program = program
            self.source = source
            self.problem = problem
            self.display = display
            self.waylandDisplay = waylandDisplay
            self.displaySource = displaySource
        }

        enum CodingKeys: String, CodingKey {
            case program, source, problem, display, waylandDisplay = "wayland_display", displaySource = "display_source"
        }
    }

    public struct Problem: Codable, Sendable, Equatable {
        public var code: String
        public var message: String
        public init(code: String, message: String) {
            self.code = code
            self.message = message
        }
    }

    public struct Account: Codable, Sendable, Equatable {
        public var name: String
        public var issuer: String
        /// Both endpoints come from config.toml; discovery only fills gaps.
        public var endpointsConfigured: Bool
        public var authorizationEndpoint: String?
        public var tokenEndpoint: String?
        public var revocationEndpoint: String?
        public var jwksURI: String?
        /// Why the metadata could not be fetched or failed validation.
        public var error: Problem?
        /// Keys in the provider's JWKS (accounts with `openid` only).
        public var signingKeys: Int?
        public var signingKeysError: Problem?
        /// The server's `Date` header, and the agent's clock when that reply arrived.
        public var serverTime: Int?
        public var agentTime: Int?

        public init(name: String, issuer: String, endpointsConfigured: Bool, authorizationEndpoint: String? = nil,
                    tokenEndpoint: String? = nil, revocationEndpoint: String? = nil, jwksURI: String? = nil,
                    error: Problem? = nil, signingKeys: Int? = nil, signingKeysError: Problem? = nil,
                    serverTime: Int? = nil, agentTime: Int? = nil) {
            self.name = name
            self.issuer = issuer
            self.endpointsConfigured = endpointsConfigured
            self.authorizationEndpoint = authorizationEndpoint
            self.tokenEndpoint = tokenEndpoint
            self.revocationEndpoint = revocationEndpoint
            self.jwksURI = jwksURI
            self.error = error
            self.signingKeys = signingKeys
            self.signingKeysError = signingKeysError
            self.serverTime = serverTime
            self.agentTime = agentTime
        }

        enum CodingKeys: String, CodingKey {
            case name, issuer, endpointsConfigured = "endpoints_configured", authorizationEndpoint = "authorization_endpoint",
                 tokenEndpoint = "token_endpoint", revocationEndpoint = "revocation_endpoint", jwksURI = "jwks_uri", error,
                 signingKeys = "signing_keys", signingKeysError = "signing_keys_error", serverTime = "server_time",
                 agentTime = "agent_time"
        }
    }

    public var agentVersion: String
    public var protocolVersion: Int
    /// available, locked, absent, error, or unused (`store = "memory"`).
    public var keyring: String
    /// The program that owns `org.freedesktop.secrets` (its executable's path, or its process name); absent when
    /// none does or the agent cannot tell.
    public var keyringService: String?
    /// What to do about the keyring, in the words of the Secret Service that answers; absent when it is available.
    public var keyringAdvice: String?
    /// `[agent] store` (auto, secret-service, memory); absent from older agents.
    public var store: String?
    /// The accounts whose sign-in lives in the agent's memory only; absent when none.
    public var keptInMemory: [String]?
    public var browser: Browser
    public var accounts: [Account]
    /// The TPM that holds `dpop_key` keys, asked when an account uses it; absent otherwise.
    public var tpm: TPM?

    /// Whether the TPM at `[agent] tpm_tcti` answered.
    public struct TPM: Codable, Sendable, Equatable {
        /// The TCTI asked.
        public var tcti: String
        /// An account has `dpop_key = "tpm"` (without the TPM it cannot sign in); otherwise only `auto` uses it.
        public var required: Bool
        /// Why it did not answer; absent when it did.
        public var problem: Problem?

        public init(tcti: String, required: Bool, problem: Problem?) {
            self.tcti = tcti
            self.required = required
            self.problem = problem
        }
    }

    public init(agentVersion: String, keyring: String, keyringService: String? = nil, keyringAdvice: String? = nil,
                store: String? = nil, keptInMemory: [String]? = nil, browser: Browser, accounts: [Account]) {
        self.agentVersion = agentVersion
        self.protocolVersion = WireProtocol.version
        self.keyring = keyring
        self.keyringService = keyringService
        self.keyringAdvice = keyringAdvice
        self.store = store
        self.keptInMemory = keptInMemory
        self.browser = browser
        self.accounts = accounts
    }

    enum CodingKeys: String, CodingKey {
        case agentVersion = "agent_version", protocolVersion = "protocol", keyring, keyringService = "keyring_service",
             keyringAdvice = "keyring_advice", store, keptInMemory = "kept_in_memory", browser, accounts, tpm
    }
}
