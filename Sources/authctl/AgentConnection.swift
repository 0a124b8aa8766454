import AgentIPC
#if canImport(Glibc)
import Glibc
#endif

/// Finds and connects to the agent's socket; shared by ArgumentParser's commands (through ``GlobalOptions``) and the
/// fast path, which must not build ArgumentParser's types.
enum AgentConnection {
    /// `--socket`, else `$AUTH_AGENT_SOCKET`, else `$XDG_RUNTIME_DIR/auth-agent/agent.sock`.
    static func path(socket: String?) throws(CLIFailure) -> String {
        guard let path = socket ?? SocketPath.resolve(variable: variable) else {
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

    /// One variable, read with getenv: no environment dictionary (ProcessInfo's, or even one of two entries) on
    /// every `authctl token`; a `[String: String]` alone costs start-up a scan of the binary's protocol conformances.
    private static func variable(_ name: String) -> String? {
        getenv(name).map { String(cString: $0) }
    }
}
