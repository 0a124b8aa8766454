#if canImport(Glibc)
import Glibc
#endif
import AgentIPC
import Logging
import NIOCore
import Synchronization

/// Sets up each accepted connection on its event loop: the peer-uid check, the caller's identity (once, from the
/// kernel), registration under the connection cap, and the pipeline: ``CachedTokenHandler`` answers cached tokens
/// right there, ``SlowRequestHandler`` runs every other request as a task of its own. No connection has a task or
/// an `NIOAsyncChannel` of its own. Also tracks when the last connection is gone (the idle hook, ``drained``).
final class ConnectionAcceptor: Sendable {
    let dispatcher: RequestDispatcher
    let logger: Logger
    let connections: ConnectionRegistry
    /// Told about every served connection, for the idle exit.
    let activity: ActivityTracker?
    /// Finishes once the server stopped accepting and the last connection is gone (``SocketServer/run()`` waits).
    let drained: AsyncStream<Never>
    private let continuation: AsyncStream<Never>.Continuation
    /// How many requests were started as tasks so far (tests check that fast-path hits start none).
    let slowRequests = Atomic<Int>(0)
    private let whenIdle: IdleHook?
    private let state = Mutex(State())
    private let myUID = getuid()
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
         whenIdle: IdleHook?) {
        self.dispatcher = dispatcher
        self.logger = logger
        self.connections = connections
        self.activity = activity
        self.whenIdle = whenIdle
        (drained, continuation) = AsyncStream.makeStream(of: Never.self)
    }

    /// The child channel initializer.
    func initialize(_ channel: any Channel) -> EventLoopFuture<Void> {
        PeerCredentials.of(channel).and(PeerCredentials.pidfd(of: channel)).flatMapThrowing { peer, pidfd in
            try self.setUp(channel, peer: peer, pidfd: pidfd)
        }
    }

    /// Errors here are not thrown for a peer the agent refuses: a failed child initializer leaves the accepted
    /// channel unregistered, so it can neither be written to nor closed and its fd leaks. ``RefusingHandler``
    /// answers and closes instead.
    private func setUp(_ channel: any Channel, peer: PeerCredentials, pidfd: ProcessFD?) throws {
        let pipeline = channel.pipeline.syncOperations
        guard peer.uid == myUID else {
            logger.warning("refused a connection from another user",
                           metadata: ["peer_pid": "\(peer.pid)", "peer_uid": "\(peer.uid)"])
            let reply = dispatcher.encodeError(nil, WireError(.permissionDenied, "this agent serves uid \(myUID) only"))
            try pipeline.addHandler(RefusingHandler(reply: reply))
            return
        }
        guard let registration = connections.add(channel) else {
            logger.warning("too many connections, all busy: closing a new one", metadata: ["peer_pid": "\(peer.pid)"])
            try pipeline.addHandler(RefusingHandler(reply: nil))
            return
        }
        activity?.begin()
        let loop = channel.eventLoop
        channel.closeFuture.whenComplete { _ in self.closed(registration, loop: loop) }
        // Who the peer is, once per connection, from the kernel (SO_PEERCRED, SO_PEERPIDFD, /proc/PID/...): the fast
        // path and the connection's task use this same value. The pidfd names the process that connected while it
        // is asked; it is released when this returns (holding one per connection would double the descriptors).
        let caller = Caller.identify(peer: peer, via: "socket", pidfd: pidfd, cache: callers)
        let connections = self.connections
        try pipeline.addHandler(ByteToMessageHandler(LineFrameDecoder(maxLength: WireProtocol.maxMessageBytes)))
        try pipeline.addHandler(CachedTokenHandler(caller: caller, operations: dispatcher.operations) {
            connections.touch(registration)
        })
        try pipeline.addHandler(SlowRequestHandler(dispatcher: dispatcher, caller: caller, connections: connections,
                                                   registration: registration) { [self] in
            self.slowRequests.add(1, ordering: .relaxed)
        })
    }

    private func closed(_ registration: Int, loop: any EventLoop) {
        connections.remove(registration)
        activity?.end()
        guard connections.count == 0 else { return }
        scheduleIdleHook(on: loop)
        finishIfDrained()
    }

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
                if let worked { whenIdle(worked) }
            }
        }
    }
}
