import AgentIPC

/// A socket of the agent's other than its own, whose connections are who the door says (the kernel fixes which
/// listener accepted a connection): a forward session's (``ForwardSessions``) or a grant's (``Grants``).
public enum Door: Hashable, Sendable {
    case forward(String)
    case grant(String)
}

/// Where the socket front end serves doors: binds a listening socket at `path` whose connections come through
/// `door`, closes it with every connection it accepted, and says when a process a door is tied to exits.
public protocol DoorListeners: Sendable {
    func listen(path: String, door: Door) throws(WireError)
    func close(door: Door)
    /// Calls `exited` once process `pid` (pinned by its start time) has exited, or at once when it has already.
    func watchExit(of process: ProcessPin, _ exited: @escaping @Sendable () -> Void)
}
