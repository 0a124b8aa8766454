import AuthCore

/// Everything read from config.toml, validated. Resolved once at start-up and passed down by value.
public struct AgentConfiguration: Sendable, Equatable {
    public var path: String
    public var accounts: [AccountConfig]
    /// trace, debug, info, notice, warning, error, critical.
    public var logLevel: String?
    /// True when the file did not exist and the agent runs with no accounts.
    public var fileMissing: Bool
    /// `[agent] http_timeout`: seconds a request to an authorization server may take before it counts as
    /// `server_unreachable` (a server that accepts and never answers must not hang a refresh).
    public var httpTimeout: Duration

    public static let defaultHTTPTimeout: Duration = .seconds(30)
    public static let httpTimeoutRange: ClosedRange<Int> = 1...300

    public init(path: String, accounts: [AccountConfig], logLevel: String? = nil, fileMissing: Bool = false,
                httpTimeout: Duration = AgentConfiguration.defaultHTTPTimeout) {
        self.path = path
        self.accounts = accounts
        self.logLevel = logLevel
        self.fileMissing = fileMissing
        self.httpTimeout = httpTimeout
    }

    /// `--config`, then `$AUTH_AGENT_CONFIG`, then `$XDG_CONFIG_HOME/auth-agent/config.toml`,
    /// then `~/.config/auth-agent/config.toml`.
    public static func defaultPath(explicit: String?, environment: [String: String]) -> (path: String, explicit: Bool)? {
        if let explicit, !explicit.isEmpty { return (explicit, true) }
        if let fromEnv = environment["AUTH_AGENT_CONFIG"], !fromEnv.isEmpty { return (fromEnv, true) }
        if let xdg = environment["XDG_CONFIG_HOME"], xdg.hasPrefix("/") { return ("\(xdg)/auth-agent/config.toml", false) }
        if let home = environment["HOME"], !home.isEmpty { return ("\(home)/.config/auth-agent/config.toml", false) }
        return nil
    }
}
