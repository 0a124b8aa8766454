#if canImport(Glibc)
import Glibc
#endif
import AgentIPC
import Logging
import NIOCore
import NIOPosix
import Synchronization

/// Gives NIO the connections the ``AcceptLoop`` hands over (their first slow request arrived), and keeps the
/// bookkeeping every connection shares: activity (the idle exit), the idle hook, and when the last connection is
/// gone (``drained``). An adopted connection's pipeline: ``CachedTokenHandler`` answers cached tokens on its event
/// loop, ``SlowRequestHandler`` runs every other request as a task of its own. No connection has a task or an
/// `NIOAsyncChannel` of its own.
final class ConnectionAcceptor: Sendable {
    let dispatcher: RequestDispatcher
    let logger: Logger
    let connections: ConnectionRegistry
    /// Told about every served connection, for the idle exit.
    let activity: ActivityTracker?
    /// Where adopted connections run.
    let group: any EventLoopGroup
    /// Finishes once the server stopped accepting and the last connection is gone (``SocketServer/run()`` waits).
    let drained: AsyncStream<Never>
    private let continuation: AsyncStream<Never>.Continuation
    /// How many requests were started as tasks so far (tests check that fast-path hits start none).
    let slowRequests = Atomic<Int>(0)
    /// How many connections the accept loop handed to NIO.
    let adopted = Atomic<Int>(0)
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

    /// A connection the accept loop passes on, with what it read and did not answer, and what it could not send.
    struct Handoff: Sendable {
        let fd: Int32
        let registration: Int
        let caller: Caller
        /// Bytes read from the client and not answered: the slow request's line and whatever followed it.
        let input: [UInt8]
        /// The rest of a fast reply the socket did not take at once.
        let output: ByteBuffer?
        /// Tells the accept gate the descriptor is closed.
        let released: @Sendable () -> Void
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

    /// Makes `handoff`'s descriptor a NIO channel on one of the group's loops, replays what the accept loop read,
    /// and serves it from then on.
    func adopt(_ handoff: Handoff) {
        adopted.add(1, ordering: .relaxed)
        let hooked = HookedFlag()
        ClientBootstrap(group: group)
            .channelOption(ChannelOptions.allowRemoteHalfClosure, value: true)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    hooked.set()
                    channel.closeFuture.whenComplete { _ in
                        self.closed(handoff.registration)
                        handoff.released()
                    }
                    try self.addHandlers(to: channel, handoff)
                }
            }
            .withConnectedSocket(handoff.fd)
            .whenFailure { error in
                self.logger.error("cannot hand a connection to the event loop", metadata: ["error": "\(error)"])
                // Without the close hook nothing else does the bookkeeping (the descriptor is NIO's by now).
                guard !hooked.isSet else { return }
                self.closed(handoff.registration)
                handoff.released()
            }
    }

    private func addHandlers(to channel: any Channel, _ handoff: Handoff) throws {
        let pipeline = channel.pipeline.syncOperations
        let (connections, registration) = (self.connections, handoff.registration)
        try pipeline.addHandler(HandoffReplay(input: handoff.input, output: handoff.output) { channel in
            connections.adopt(registration, channel: channel)
        })
        try pipeline.addHandler(ByteToMessageHandler(LineFrameDecoder(maxLength: WireProtocol.maxMessageBytes)))
        try pipeline.addHandler(CachedTokenHandler(caller: handoff.caller, operations: dispatcher.operations) {
            connections.touch(registration)
        })
        try pipeline.addHandler(SlowRequestHandler(dispatcher: dispatcher, caller: handoff.caller,
                                                   connections: connections, registration: registration) { [self] in
            self.slowRequests.add(1, ordering: .relaxed)
        })
    }

    /// A registered connection's descriptor was closed (by the accept loop or NIO).
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

/// Whether ``ConnectionAcceptor/adopt(_:)``'s channel initializer ran (and so hooked the close bookkeeping).
private final class HookedFlag: Sendable {
    private let value = Atomic<Bool>(false)
    func set() { value.store(true, ordering: .releasing) }
    var isSet: Bool { value.load(ordering: .acquiring) }
}

/// The first handler of an adopted connection: once the channel is active it writes the rest of a reply the accept
/// loop could not send, replays the bytes the loop read and did not answer (so they are decoded in order, before
/// anything NIO reads), hands the registry the channel, and leaves the pipeline.
final class HandoffReplay: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private let input: [UInt8]
    private let output: ByteBuffer?
    private let active: (any Channel) -> Void

    init(input: [UInt8], output: ByteBuffer?, active: @escaping (any Channel) -> Void) {
        self.input = input
        self.output = output
        self.active = active
    }

    func channelActive(context: ChannelHandlerContext) {
        context.fireChannelActive()
        if let output, output.readableBytes > 0 { context.writeAndFlush(wrapOutboundOut(output), promise: nil) }
        if !input.isEmpty {
            context.fireChannelRead(wrapInboundOut(context.channel.allocator.buffer(bytes: input)))
            context.fireChannelReadComplete()
        }
        // After the replay: a shutdown under way closes the input now, and the replayed requests still answer.
        active(context.channel)
        context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
    }
}
