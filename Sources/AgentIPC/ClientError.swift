/// Why a client call failed before an answer from the agent could be read.
public enum ClientError: Error, Equatable, Sendable {
    /// No socket path could be determined (neither AUTH_AGENT_SOCKET nor XDG_RUNTIME_DIR is set).
    case noSocketPath
    /// Nothing listens on the socket (ENOENT, ECONNREFUSED): the agent is not running.
    case agentNotRunning(path: String, errno: Int32)
    /// The socket exists but we may not use it, or another I/O error happened.
    case io(String)
    /// The agent closed the connection, or sent something that is not protocol version 1 or that answers another
    /// request (``ReplyReader``).
    case protocolViolation(String)
    /// The agent answered with an error.
    case agent(WireError)
    /// The agent did not accept the connection, or did not answer, within the caller's time limit.
    case timeout(String)
    /// A connection through an `authctl forward` session (``AgentClient/throughForward``) was closed before any
    /// answer: sshd on the host accepted it, but the desktop's end is gone (the forward was stopped there, or the
    /// agent there stopped).
    case forwardEnded(path: String)
}
