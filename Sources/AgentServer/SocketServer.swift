#if canImport(Glibc)
import Glibc
#endif
import AgentIPC
import Foundation
import Logging
import NIOCore
import NIOPosix
import ServiceLifecycle
import Synchronization

/// The agent's Unix socket server. One task per connection; a bad or slow client affects only itself. Cached-token
/// requests are answered on the event loop (``CachedTokenHandler``); everything else reaches the connection's task.
public final class SocketServer: Service {
    public enum Endpoint: Sendable {
        /// Bind this path ourselves (the directory must already be prepared).
        case path(String)
        /// A listening socket passed by systemd (LISTEN_FDS).
        case inherited(fd: Int32)
    }

    /// At most this many requests in flight per connection; more wait until one finishes.
    public static let maxInFlightPerConnection = 16
    /// At most this many client connections at once (fewer if RLIMIT_NOFILE is lower, see ``connectionLimit``).
    /// At the cap, the connection idle longest is closed to make room, so idle clients cannot lock out a real one.
    public static let maxConnections = 4096

    typealias Connection = NIOAsyncChannel<RequestDispatcher.Decoded, ByteBuffer>

    let serverChannel: NIOAsyncChannel<Connection, Never>
    let dispatcher: RequestDispatcher
    let logger: Logger
    let boundPath: String?
    let connections: ConnectionRegistry
    /// Told about every served connection, for the idle exit.
    let activity: ActivityTracker?
    /// Run when no client has been connected for ``idleHookDelay`` (the agent returns freed heap to the kernel).
    let whenIdle: (@Sendable () -> Void)?
    private let idleHook = Mutex<Scheduled<Void>?>(nil)
    /// How long the last connection must be gone before ``whenIdle`` runs; at most one run per this period, so a
    /// client that connects once per request does not pay for it.
    public static let idleHookDelay: TimeAmount = .seconds(1)

    private init(serverChannel: NIOAsyncChannel<Connection, Never>,
                 dispatcher: RequestDispatcher, logger: Logger, boundPath: String?, activity: ActivityTracker?,
                 connections: ConnectionRegistry, whenIdle: (@Sendable () -> Void)?) {
        self.connections = connections
        self.whenIdle = whenIdle
        self.serverChannel = serverChannel
        self.dispatcher = dispatcher
        self.logger = logger
        self.boundPath = boundPath
        self.activity = activity
    }

    /// Starts listening. When this returns, clients can connect (send READY=1 after it).
    ///
    /// By default every connection is served on one event loop (one thread) of NIO's shared group: the fast path
    /// answers on it without a thread hop, and on a small machine shared with its clients more loops meant more
    /// wake-ups and migrations, not more throughput (docs/BENCHMARKS.md).
    public static func listen(_ endpoint: Endpoint, dispatcher: RequestDispatcher, logger: Logger,
                              activity: ActivityTracker? = nil, whenIdle: (@Sendable () -> Void)? = nil,
                              group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton.next()) async throws -> SocketServer {
        let myUID = getuid()
        let operations = dispatcher.operations
        let connections = ConnectionRegistry(limit: SocketServer.connectionLimit())
        let bootstrap = ServerBootstrap(group: group)
            .serverChannelOption(ChannelOptions.backlog, value: 256)
            .childChannelOption(ChannelOptions.allowRemoteHalfClosure, value: true)
        let initializer: @Sendable (any Channel) -> EventLoopFuture<Connection> = { channel in
            PeerCredentials.of(channel).and(PeerCredentials.pidfd(of: channel)).flatMapThrowing { peer, pidfd in
                guard peer.uid == myUID else {
                    logger.warning("refused a connection from another user",
                                   metadata: ["peer_pid": "\(peer.pid)", "peer_uid": "\(peer.uid)"])
                    // Not thrown: a failed child initializer leaves the accepted channel unregistered, so it can
                    // neither be written to nor closed and its fd leaks. serve() answers permission_denied and
                    // closes it, without reading anything from it.
                    let caller = Caller(pid: peer.pid, uid: peer.uid, via: "socket")
                    try channel.pipeline.syncOperations.addHandler(
                        PeerCredentialsHandler(peer: peer, caller: caller, refused: true))
                    return try Connection(wrappingChannelSynchronously: channel)
                }
                // Who the peer is, once per connection, from the kernel (SO_PEERCRED, SO_PEERPIDFD, /proc/PID/...):
                // the fast path and the connection's task use this same value. The pidfd names the process that
                // connected while it is asked; it is released when this closure returns, before the connection is
                // served (holding one per connection would double the agent's descriptors).
                let caller = Caller.identify(peer: peer, via: "socket", pidfd: pidfd)
                let credentials = PeerCredentialsHandler(peer: peer, caller: caller)
                try channel.pipeline.syncOperations.addHandler(credentials)
                try channel.pipeline.syncOperations.addHandler(
                    ByteToMessageHandler(LineFrameDecoder(maxLength: WireProtocol.maxMessageBytes)))
                try channel.pipeline.syncOperations.addHandler(CachedTokenHandler(caller: caller, operations: operations) {
                    if let id = credentials.registration { connections.touch(id) }
                })
                return try Connection(wrappingChannelSynchronously: channel)
            }
        }
        let channel: NIOAsyncChannel<Connection, Never>
        var boundPath: String?
        switch endpoint {
        case .path(let path):
            // umask makes the socket 0600 from the moment it exists; chmod repeats it for clarity.
            let old = umask(0o177)
            defer { umask(old) }
            channel = try await bootstrap.bind(unixDomainSocketPath: path, cleanupExistingSocketFile: false,
                                               childChannelInitializer: initializer)
            chmod(path, 0o600)
            boundPath = path
        case .inherited(let fd):
            channel = try await bootstrap.bind(NIOBSDSocket.Handle(fd), cleanupExistingSocketFile: false,
                                               childChannelInitializer: initializer)
        }
        return SocketServer(serverChannel: channel, dispatcher: dispatcher, logger: logger, boundPath: boundPath,
                            activity: activity, connections: connections, whenIdle: whenIdle)
    }

    /// ``maxConnections``, lowered to leave room under the open-file limit (the agent raises its soft limit to
    /// the hard one at start-up; a low hard limit lowers the cap instead of failing accept()).
    static func connectionLimit() -> Int {
        var limit = rlimit()
        guard getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return maxConnections }
        return max(16, min(maxConnections, Int(clamping: limit.rlim_cur) - 256))
    }

    public func run() async throws {
        try await withGracefulShutdownHandler {
            try await withThrowingDiscardingTaskGroup { group in
                try await serverChannel.executeThenClose { inbound in
                    for try await connection in inbound {
                        group.addTask { await self.serve(connection) }
                    }
                }
            }
        } onGracefulShutdown: {
            // Stop accepting, then stop reading from every client: requests already running still get their
            // reply, sign-ins waiting for a person are cancelled, idle connections end.
            self.serverChannel.channel.close(promise: nil)
            self.connections.closeInputOfAll()
        }
        if let boundPath { unlink(boundPath) }
    }

    /// Serves one connection until the client closes it. Errors end this connection only.
    func serve(_ connection: Connection) async {
        let dispatcher = self.dispatcher
        // No credentials (cannot happen: the initializer adds them) is treated like another user: fail closed.
        guard let credentials = try? await connection.channel.pipeline.handler(type: PeerCredentialsHandler.self).get(),
              !credentials.refused
        else {
            let reply = dispatcher.encodeError(nil, WireError(.permissionDenied, "this agent serves uid \(getuid()) only"))
            try? await connection.executeThenClose { _, outbound in
                try await outbound.write(ByteBuffer(bytes: reply + [0x0A]))
            }
            return
        }
        let peer = credentials.peer
        let caller = credentials.caller
        guard let registration = connections.add(connection.channel) else {
            logger.warning("too many connections, all busy: closing a new one", metadata: ["peer_pid": "\(peer.pid)"])
            try? await connection.executeThenClose { _, _ in }
            return
        }
        let registry = self.connections
        credentials.registration = registration
        activity?.begin()
        defer {
            registry.remove(registration)
            activity?.end()
            if registry.count == 0 { scheduleIdleHook() }
        }
        do {
            try await connection.executeThenClose { inbound, outbound in
                let writer = LineWriter(outbound: outbound)
                await withTaskGroup(of: Void.self) { group in
                    var inFlight = 0
                    var personTasks: [Task<Void, Never>] = []
                    do {
                        for try await decoded in inbound {
                            if inFlight >= SocketServer.maxInFlightPerConnection {
                                await group.next()
                                inFlight -= 1
                            }
                            switch decoded {
                            case .invalid(let id, let error):
                                await writer.write(dispatcher.encodeError(id, error))
                            case .request(let request):
                                inFlight += 1
                                registry.begin(registration)
                                if dispatcher.waitsForPerson(request) {
                                    // Cancelled when the client hangs up: a closed `authctl login` cancels its sign-in.
                                    let task = Task {
                                        defer { registry.end(registration) }
                                        let reply = await dispatcher.execute(request, caller: caller) { await writer.write($0) }
                                        await writer.write(reply)
                                    }
                                    personTasks.append(task)
                                    group.addTask { await task.value }
                                } else {
                                    group.addTask {
                                        defer { registry.end(registration) }
                                        let reply = await dispatcher.execute(request, caller: caller) { await writer.write($0) }
                                        await writer.write(reply)
                                    }
                                }
                            }
                        }
                    } catch is LineFrameDecoder.LineTooLong {
                        await writer.write(dispatcher.encodeError(nil, WireError(.messageTooLarge,
                            "a request line exceeded \(WireProtocol.maxMessageBytes) bytes; closing the connection")))
                    } catch {
                        logger.debug("connection ended with an error", metadata: ["peer_pid": "\(peer.pid)", "error": "\(error)"])
                    }
                    // The client closed its side: requests that only answer still get their reply (half-close);
                    // requests that wait for a person are cancelled.
                    for task in personTasks { task.cancel() }
                    await group.waitForAll()
                }
            }
        } catch {
            logger.debug("connection closed", metadata: ["peer_pid": "\(peer.pid)", "error": "\(error)"])
        }
    }
}

extension SocketServer {
    /// Runs ``whenIdle`` once the last connection has been gone for ``idleHookDelay`` (no more than once a period).
    func scheduleIdleHook() {
        guard let whenIdle else { return }
        let loop = serverChannel.channel.eventLoop
        let registry = connections
        idleHook.withLock { pending in
            guard pending == nil else { return }
            pending = loop.scheduleTask(in: SocketServer.idleHookDelay) { [self] in
                idleHook.withLock { $0 = nil }
                if registry.count == 0 { whenIdle() }
            }
        }
    }
}

/// Writes whole lines; a write to a vanished client fails quietly (SIGPIPE is ignored process-wide and NIO uses
/// MSG_NOSIGNAL semantics), never taking the agent down.
actor LineWriter {
    let outbound: NIOAsyncChannelOutboundWriter<ByteBuffer>
    init(outbound: NIOAsyncChannelOutboundWriter<ByteBuffer>) { self.outbound = outbound }

    func write(_ line: [UInt8]) async {
        var buffer = ByteBuffer()
        buffer.reserveCapacity(line.count + 1)
        buffer.writeBytes(line)
        buffer.writeInteger(UInt8(0x0A))
        try? await outbound.write(buffer)
    }
}

/// Carries the peer's credentials and ``Caller`` from channel set-up to the connection task, and the connection's
/// registration back to the fast path. A refused peer's bytes are dropped here, never decoded.
final class PeerCredentialsHandler: ChannelInboundHandler, Sendable {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer
    let peer: PeerCredentials
    let caller: Caller
    /// The peer is another user: the connection gets permission_denied and is closed, nothing is read.
    let refused: Bool
    private let registrationBox = Mutex<Int?>(nil)

    init(peer: PeerCredentials, caller: Caller, refused: Bool = false) {
        self.peer = peer
        self.caller = caller
        self.refused = refused
    }

    /// The connection's id in the ``ConnectionRegistry``, set by the connection task once it is registered.
    var registration: Int? {
        get { registrationBox.withLock { $0 } }
        set { registrationBox.withLock { $0 = newValue } }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !refused else { return }
        context.fireChannelRead(data)
    }
}
