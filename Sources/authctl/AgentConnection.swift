import AgentIPC
#if canImport(Glibc)
import Glibc
#endif

/// Finds and connects to the agent's socket; shared by ArgumentParser's commands (through ``GlobalOptions``) and the
/// fast path, which must not build ArgumentParser's types.
enum AgentConnection {
    /// `--socket`, else `$AUTH_AGENT_SOCKET`, else `$XDG_RUNTIME_DIR/auth-agent/agent.sock`.
    static func path(socket: String?) throws(CLIFailure) -> String {
        guard let path = socket ?? SocketPath.resolve(environment: environment()) else {
            throw CLIFailure(ClientError.noSocketPath)
        }
        return path
    }

    static func connect(socket: String?) throws(CLIFailure) -> AgentClient {
        let path = try self.path(socket: socket)
        do {
            return try AgentClient(path: path)
        } catch {
            throw CLIFailure(error)
        }
    }

    /// Only the two variables the socket path depends on, read with getenv: cheaper than building
    /// ProcessInfo's whole environment dictionary on every `authctl token`.
    private static func environment() -> [String: String] {
        var result: [String: String] = [:]
        for name in ["AUTH_AGENT_SOCKET", "XDG_RUNTIME_DIR"] {
            if let value = getenv(name) { result[name] = String(cString: value) }
        }
        return result
    }
}
