#if canImport(Glibc)
import Glibc
#endif
import AgentIPC
import Foundation
import Logging
import NIOCore
import NIOPosix
import ServiceLifecycle

/// The agent's Unix socket server. One task per connection; a bad or slow client affects only itself.
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

    let serverChannel: NIOAsyncChannel<NIOAsyncChannel<ByteBuffer, ByteBuffer>, Never>
    let dispatcher: RequestDispatcher
    let logger: Logger
    let boundPath: String?
    let connections = ConnectionRegistry(limit: SocketServer.connectionLimit())
    /// Told about every served connection, for the idle exit.
    let activity: ActivityTracker?

    private init(serverChannel: NIOAsyncChannel<NIOAsyncChannel<ByteBuffer, ByteBuffer>, Never>,
                 dispatcher: RequestDispatcher, logger: Logger, boundPath: String?, activity: ActivityTracker?) {
        self.serverChannel = serverChannel
        self.dispatcher = dispatcher
        self.logger = logger
        self.boundPath = boundPath
        self.activity = activity
    }

    /// Starts listening. When this returns, clients can connect (send READY=1 after it).
    public static func listen(_ endpoint: Endpoint, dispatcher: RequestDispatcher, logger: Logger,
                              activity: ActivityTracker? = nil,
                              group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton) async throws -> SocketServer {
        let myUID = getuid()
        let bootstrap = ServerBootstrap(group: group)
            .serverChannelOption(ChannelOptions.backlog, value: 256)
            .childChannelOption(ChannelOptions.allowRemoteHalfClosure, value: true)
        let initializer: @Sendable (any Channel) -> EventLoopFuture<NIOAsyncChannel<ByteBuffer, ByteBuffer>> = { channel in
            PeerCredentials.of(channel).flatMapThrowing { peer in
                guard peer.uid == myUID else {
                    logger.warning("refused a connection from another user",
                                   metadata: ["peer_pid": "\(peer.pid)", "peer_uid": "\(peer.uid)"])
                    // Not thrown: a failed child initializer leaves the accepted channel unregistered, so it can
                    // neither be written to nor closed and its fd leaks. serve() answers permission_denied and
                    // closes it, without reading anything from it.
                    try channel.pipeline.syncOperations.addHandler(PeerCredentialsHandler(peer: peer, refused: true))
                    return try NIOAsyncChannel<ByteBuffer, ByteBuffer>(wrappingChannelSynchronously: channel)
                }
                try channel.pipeline.syncOperations.addHandler(
                    ByteToMessageHandler(LineFrameDecoder(maxLength: WireProtocol.maxMessageBytes)))
                try channel.pipeline.syncOperations.addHandler(PeerCredentialsHandler(peer: peer))
                return try NIOAsyncChannel<ByteBuffer, ByteBuffer>(wrappingChannelSynchronously: channel)
            }
        }
        let channel: NIOAsyncChannel<NIOAsyncChannel<ByteBuffer, ByteBuffer>, Never>
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
                            activity: activity)
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
    func serve(_ connection: NIOAsyncChannel<ByteBuffer, ByteBuffer>) async {
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
        // Who the peer is, once per connection, from the kernel (SO_PEERCRED, SO_PEERPIDFD, /proc/PID/...). The
        // pidfd names the process that connected whenever it is asked for (the socket holds that process's pid); it
        // is a temporary of this one statement, so it is closed before the connection is served.
        let caller = Caller.identify(peer: peer, via: "socket", pidfd: (try? await PeerCredentials.pidfd(of: connection.channel).get()) ?? nil)
        guard let registration = connections.add(connection.channel) else {
            logger.warning("too many connections, all busy: closing a new one", metadata: ["peer_pid": "\(peer.pid)"])
            try? await connection.executeThenClose { _, _ in }
            return
        }
        let registry = self.connections
        activity?.begin()
        defer {
            registry.remove(registration)
            activity?.end()
        }
        do {
            try await connection.executeThenClose { inbound, outbound in
                let writer = LineWriter(outbound: outbound)
                await withTaskGroup(of: Void.self) { group in
                    var inFlight = 0
                    var personTasks: [Task<Void, Never>] = []
                    do {
                        for try await line in inbound {
                            if inFlight >= SocketServer.maxInFlightPerConnection {
                                await group.next()
                                inFlight -= 1
                            }
                            switch dispatcher.decode(Array(buffer: line)) {
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

/// Carries the peer's credentials from channel set-up to the connection task.
final class PeerCredentialsHandler: ChannelInboundHandler, Sendable {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer
    let peer: PeerCredentials
    /// The peer is another user: the connection gets permission_denied and is closed, nothing is read.
    let refused: Bool
    init(peer: PeerCredentials, refused: Bool = false) {
        self.peer = peer
        self.refused = refused
    }
}
