/// Where config.toml is: `--config`, then `$AUTH_AGENT_CONFIG`, then `$XDG_CONFIG_HOME/auth-agent/config.toml`,
/// then `~/.config/auth-agent/config.toml`. The agent reads it and `authctl accounts add/remove` edits it, so both
/// resolve it here.
public enum ConfigPath {
    public static func resolve(explicit: String?, environment: [String: String]) -> (path: String, explicit: Bool)? {
        if let explicit, !explicit.isEmpty { return (explicit, true) }
        if let fromEnv = environment["AUTH_AGENT_CONFIG"], !fromEnv.isEmpty { return (fromEnv, true) }
        if let xdg = environment["XDG_CONFIG_HOME"], xdg.hasPrefix("/") { return ("\(xdg)/auth-agent/config.toml", false) }
        if let home = environment["HOME"], !home.isEmpty { return ("\(home)/.config/auth-agent/config.toml", false) }
        return nil
    }
}
