#if canImport(Glibc)
import Glibc
#endif
import AgentIPC
import AgentService
import Logging
import NIOCore
import Synchronization

/// The bookkeeping every connection of the socket shares, whichever ``AcceptLoop`` owns it: the dispatcher its
/// requests run on, the connection registry, the identities of callers seen before, activity (the idle exit), the
/// idle hook, and when the last connection is gone (``drained``).
final class ConnectionAcceptor: Sendable {
    let dispatcher: RequestDispatcher
    let logger: Logger
    let connections: ConnectionRegistry
    /// Told about every served connection, for the idle exit.
    let activity: ActivityTracker?
    /// Where the idle hook runs.
    let group: any EventLoopGroup
    /// Finishes once the server stopped accepting and the last connection is gone (``SocketServer/run()`` waits).
    let drained: AsyncStream<Never>
    private let continuation: AsyncStream<Never>.Continuation
    /// How many requests were started as tasks so far (tests check that fast-path hits start none).
    let slowRequests = Atomic<Int>(0)
    private let whenIdle: IdleHook?
    private let state = Mutex(State())
    /// Identities of processes that connected before (a reconnecting client is not read in full again).
    let callers = CallerCache()

    private struct State {
        var stoppedAccepting = false
        var finished = false
        var idleHook: Scheduled<Void>?
        /// ``slowRequests`` when the idle hook last ran (-1: never, so the first idle after start-up counts as work).
        var slowRequestsAtLastIdle = -1
    }

    init(dispatcher: RequestDispatcher, logger: Logger, connections: ConnectionRegistry, activity: ActivityTracker?,
         whenIdle: IdleHook?, group: any EventLoopGroup) {
        self.dispatcher = dispatcher
        self.logger = logger
        self.connections = connections
        self.activity = activity
        self.whenIdle = whenIdle
        self.group = group
        (drained, continuation) = AsyncStream.makeStream(of: Never.self)
    }

    /// The accept loop registered a connection.
    func opened() { activity?.begin() }

    /// A registered connection's descriptor was closed.
    func closed(_ registration: Int) {
        connections.remove(registration)
        activity?.end()
        guard connections.count == 0 else { return }
        scheduleIdleHook(on: group.next())
        finishIfDrained()
    }

    /// Runs the idle hook a second after start-up unless a client comes first: what start-up mapped and allocated
    /// (configuration, the keyring, D-Bus) is given back even if no client ever connects.
    func started() { scheduleIdleHook(on: group.next()) }

    /// The listening socket is closed: once the last connection is gone, ``drained`` ends.
    func stopAccepting() {
        state.withLock { $0.stoppedAccepting = true }
        finishIfDrained()
    }

    private func finishIfDrained() {
        let finish = state.withLock { state in
            guard state.stoppedAccepting, !state.finished, connections.count == 0 else { return false }
            state.finished = true
            return true
        }
        if finish { continuation.finish() }
    }

    /// How long the last connection must be gone before `whenIdle` runs; at most one run per this period, so a
    /// client that connects once per request does not pay for it.
    static let idleHookDelay: TimeAmount = .seconds(1)

    /// Runs `whenIdle` once the last connection has been gone for ``idleHookDelay`` (no more than once a period).
    private func scheduleIdleHook(on loop: any EventLoop) {
        guard let whenIdle else { return }
        let registry = connections
        state.withLock { state in
            guard state.idleHook == nil else { return }
            state.idleHook = loop.scheduleTask(in: ConnectionAcceptor.idleHookDelay) { [self] in
                // A client connected in the meantime: not idle; the work done so far still counts next time.
                let worked = self.state.withLock { state -> Bool? in
                    state.idleHook = nil
                    guard registry.count == 0 else { return nil }
                    let slow = self.slowRequests.load(ordering: .relaxed)
                    defer { state.slowRequestsAtLastIdle = slow }
                    return slow != state.slowRequestsAtLastIdle
                }
                guard let worked else { return }
                // Processes that have exited give back their pinned /proc/PID/exe descriptors.
                self.callers.sweep()
                whenIdle(worked)
            }
        }
    }
}
