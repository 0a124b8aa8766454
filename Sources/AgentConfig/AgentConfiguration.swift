import AuthCore

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
    /// `[agent] notifications`: show a desktop notification (once per account) when an account must sign in.
    public var notifications: Bool

    /// One hour: proactive refresh keeps an account's token fresh only for an hour after its last use
    /// (`RefreshPolicy.recentUse`), so after an hour with no client the agent's memory is worth at most one refresh.
    public static let defaultIdleExit: Duration = .seconds(3600)

    public init(path: String, accounts: [AccountConfig], logLevel: String? = nil, fileMissing: Bool = false,
                idleExit: Duration = AgentConfiguration.defaultIdleExit, notifications: Bool = true) {
        self.path = path
        self.accounts = accounts
        self.logLevel = logLevel
        self.fileMissing = fileMissing
        self.idleExit = idleExit
        self.notifications = notifications
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
