import AuthCore
import SessionEnvironment

/// Everything read from config.toml, validated. Resolved once at start-up and passed down by value.
public struct AgentConfiguration: Sendable, Equatable {
    public var path: String
    public var accounts: [AccountConfig]
    /// trace, debug, info, notice, warning, error, critical.
    public var logLevel: String?
    /// True when the file did not exist and the agent runs with no accounts.
    public var fileMissing: Bool

    public init(path: String, accounts: [AccountConfig], logLevel: String? = nil, fileMissing: Bool = false) {
        self.path = path
        self.accounts = accounts
        self.logLevel = logLevel
        self.fileMissing = fileMissing
    }

    /// `--config`, then `$AUTH_AGENT_CONFIG`, then `$XDG_CONFIG_HOME/auth-agent/config.toml`,
    /// then `~/.config/auth-agent/config.toml`.
    public static func defaultPath(explicit: String?, environment: [String: String]) -> (path: String, explicit: Bool)? {
        ConfigPath.resolve(explicit: explicit, environment: environment)
    }
}
