/// Where the agent's socket is: `$AUTH_AGENT_SOCKET`, else `$XDG_RUNTIME_DIR/auth-agent/agent.sock`.
/// Shared by agent and CLI so they can never disagree.
public enum SocketPath {
    public static let directoryName = "auth-agent"
    public static let fileName = "agent.sock"

    public static func resolve(environment: [String: String]) -> String? {
        if let explicit = environment["AUTH_AGENT_SOCKET"], !explicit.isEmpty { return explicit }
        guard let runtime = environment["XDG_RUNTIME_DIR"], !runtime.isEmpty else { return nil }
        return defaultPath(runtimeDirectory: runtime)
    }

    public static func defaultPath(runtimeDirectory: String) -> String {
        let base = runtimeDirectory.hasSuffix("/") ? String(runtimeDirectory.dropLast()) : runtimeDirectory
        return "\(base)/\(directoryName)/\(fileName)"
    }
}
