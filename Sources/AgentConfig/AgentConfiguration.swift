import AuthCore
import ConfigFile

/// Everything read from config.toml, validated. Resolved once at start-up and passed down by value.
public struct AgentConfiguration: Sendable, Equatable {
    public var path: String
    public var accounts: [AccountConfig]
    /// trace, debug, info, notice, warning, error, critical.
    public var logLevel: String?
    /// True when the file did not exist and the agent runs with no accounts.
    public var fileMissing: Bool
    /// `[agent] idle_exit`: when socket-activated, exit after this long without clients, sign-ins or refreshes
    /// (zero: never). Activation starts the agent again on the next connection.
    public var idleExit: Duration
    /// `[agent] http_timeout`: seconds a request to an authorization server may take before it counts as
    /// `server_unreachable` (a server that accepts and never answers must not hang a refresh).
    public var httpTimeout: Duration
    /// `[agent] notifications`: show a desktop notification (once per account) when an account must sign in.
    public var notifications: Bool
    /// `[agent] consent_timeout`: how long a request waits for the user's Allow/Deny (`confirm = "first-use"`)
    /// before it is refused with `access_denied`.
    public var consentTimeout: Duration
    /// `[agent] store`: where sign-ins are kept (``StoreChoice``; default `auto`: the Secret Service when one
    /// answers, else memory only).
    public var store: StoreChoice
    /// `[agent] tpm_tcti`: the TPM that holds `dpop_key = "tpm"` keys, as a tpm2-tss TCTI string (default the
    /// kernel's resource manager, ``defaultTPMTCTI``; `swtpm:host=127.0.0.1,port=2321` for a simulator).
    public var tpmTCTI: String = AgentConfiguration.defaultTPMTCTI

    public static let defaultTPMTCTI = "device:/dev/tpmrm0"

    /// One hour: proactive refresh keeps an account's token fresh only for an hour after its last use
    /// (`RefreshPolicy.recentUse`), so after an hour with no client the agent's memory is worth at most one refresh.
    public static let defaultIdleExit: Duration = .seconds(3600)
    public static let defaultHTTPTimeout: Duration = .seconds(30)
    public static let httpTimeoutRange: ClosedRange<Int> = 1...300
    public static let defaultConsentTimeout: Duration = .seconds(60)
    public static let consentTimeoutRange: ClosedRange<Int> = 1...600

    public init(path: String, accounts: [AccountConfig], logLevel: String? = nil, fileMissing: Bool = false,
                idleExit: Duration = AgentConfiguration.defaultIdleExit,
                httpTimeout: Duration = AgentConfiguration.defaultHTTPTimeout, notifications: Bool = true,
                consentTimeout: Duration = AgentConfiguration.defaultConsentTimeout, store: StoreChoice = .auto) {
        self.store = store
        self.path = path
        self.accounts = accounts
        self.logLevel = logLevel
        self.fileMissing = fileMissing
        self.idleExit = idleExit
        self.httpTimeout = httpTimeout
        self.notifications = notifications
        self.consentTimeout = consentTimeout
    }

    /// `--config`, then `$AUTH_AGENT_CONFIG`, then `$XDG_CONFIG_HOME/auth-agent/config.toml`,
    /// then `~/.config/auth-agent/config.toml`.
    public static func defaultPath(explicit: String?, environment: [String: String]) -> (path: String, explicit: Bool)? {
        ConfigPath.resolve(explicit: explicit, environment: environment)
    }
}
