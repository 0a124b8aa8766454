import AgentIPC
import Glibc

/// Finds and connects to the agent's socket; shared by ArgumentParser's commands (through ``GlobalOptions``) and the
/// fast path, which must not build ArgumentParser's types.
enum AgentConnection {
    /// `--socket`, else `$AUTH_AGENT_SOCKET`, else `$XDG_RUNTIME_DIR/auth-agent/agent.sock`. In an SSH session
    /// (`$SSH_CONNECTION`) on a host without an agent socket of its own there, an `authctl forward` made to this
    /// host (``ForwardedSocket/find()``): a host's own agent comes first, and outside SSH sessions nothing is looked
    /// for (no cost to `authctl token` on the desktop). Looking for a forward also removes the dead sockets of ended
    /// sessions (sshd leaves them behind).
    static func path(socket: String?) throws(CLIFailure) -> String {
        if let socket { return socket }
        if let explicit = variable("AUTH_AGENT_SOCKET"), !explicit.isEmpty {
            // The forward sshd passed on (AcceptEnv): the dead ones of earlier sessions go, as ``ForwardedSocket/find()``
            // removes them.
            if variable("SSH_CONNECTION") != nil, ForwardedSocket.isForward(explicit) {
                ForwardedSocket.sweep(ForwardedSocket.ours().filter { $0 != explicit })
            }
            return explicit
        }
        let local = SocketPath.resolve(variable: variable)
        if variable("SSH_CONNECTION") != nil, local.map({ access($0, F_OK) != 0 }) ?? true,
           let forwarded = ForwardedSocket.find() {
            return forwarded
        }
        guard let local else { throw CLIFailure(ClientError.noSocketPath) }
        return local
    }

    /// How long a verb waits for the agent's answer (every verb is bounded but those that wait for a person).
    enum Patience {
        /// Answers from memory or one keyring read: status, accounts, audit, pending, approve, deny, forget, reload.
        case quick
        /// May wait for an authorization server and the keyring: token, logout, doctor, git-credential,
        /// kube-credential (a refresh is bounded by the agent's http_timeout and its 20 s keyring limit).
        case network
        /// Waits for a person (a sign-in, or a token that may start one): no reply limit; Ctrl-C ends it.
        case person

        var limit: Duration? {
            switch self {
            case .quick: return .seconds(30)
            case .network: return .seconds(120)
            case .person: return nil
            }
        }
    }

    /// The reply limit of a verb: `timeout` (seconds, from --timeout) replaces the verb's own; 0 means none.
    static func replyLimit(_ patience: Patience, timeout: Int?) -> Duration? {
        timeout.map { $0 > 0 ? .seconds($0) : nil } ?? patience.limit
    }

    /// `timeout` (seconds, from --timeout) replaces the verb's own limit; 0 means none.
    static func connect(socket: String?, patience: Patience = .quick, timeout: Int? = nil) throws(CLIFailure) -> AgentClient {
        let path = try self.path(socket: socket)
        do {
            let client = try AgentClient(path: path, replyTimeout: replyLimit(patience, timeout: timeout))
            // In an SSH session the agent may be on the other end of a forward: it shows the user which program
            // here asks (the agent ignores it from local callers).
            if variable("SSH_CONNECTION") != nil {
                client.program = ForwardedSocket.askingProgram()
                client.throughForward = ForwardedSocket.isForward(path)
            }
            return client
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
