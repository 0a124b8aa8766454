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

/// Runs once no client has been connected for a second; `workedSinceLastIdle` is true when a slow request (anything
/// but a cached-token hit) ran since the hook last ran, and the first time.
public typealias IdleHook = @Sendable (_ workedSinceLastIdle: Bool) -> Void

/// The agent's Unix socket server. Each connection is set up on the event loop by ``ConnectionAcceptor``; cached-token
/// requests are answered there (``CachedTokenHandler``), every other request runs as a task of its own
/// (``SlowRequestHandler``). A bad or slow client affects only itself.
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

    let serverChannel: any Channel
    let acceptor: ConnectionAcceptor
    let gate: AcceptGate
    let dispatcher: RequestDispatcher
    let boundPath: String?

    private init(serverChannel: any Channel, acceptor: ConnectionAcceptor, gate: AcceptGate, dispatcher: RequestDispatcher,
                 boundPath: String?) {
        self.serverChannel = serverChannel
        self.acceptor = acceptor
        self.gate = gate
        self.dispatcher = dispatcher
        self.boundPath = boundPath
    }

    /// Starts listening. When this returns, clients can connect (send READY=1 after it). `whenIdle` runs when no
    /// client has been connected for a second (the agent returns freed heap to the kernel), and says whether any
    /// slow request ran since it last ran (then the agent also unmaps the code that work paged in).
    ///
    /// By default connections are spread over NIO's shared group (one event loop per core). With a task and an
    /// actor hop per request one loop was faster; now that a cached token is answered on the loop that read it, two
    /// loops on the 2-core bench machine gave 1.6 x the persistent and new-connection throughput of one
    /// (docs/BENCHMARKS.md).
    public static func listen(_ endpoint: Endpoint, dispatcher: RequestDispatcher, logger: Logger,
                              activity: ActivityTracker? = nil, whenIdle: IdleHook? = nil,
                              group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton) async throws -> SocketServer {
        try await listen(endpoint, dispatcher: dispatcher, logger: logger, activity: activity, whenIdle: whenIdle,
                         group: group, connectionLimit: SocketServer.connectionLimit())
    }

    /// ``listen(_:dispatcher:logger:activity:whenIdle:group:)`` with the connection cap given (tests use a small one).
    static func listen(_ endpoint: Endpoint, dispatcher: RequestDispatcher, logger: Logger, activity: ActivityTracker?,
                       whenIdle: IdleHook?,
                       group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
                       connectionLimit: Int) async throws -> SocketServer {
        let acceptor = ConnectionAcceptor(dispatcher: dispatcher, logger: logger,
                                          connections: ConnectionRegistry(limit: connectionLimit),
                                          activity: activity, whenIdle: whenIdle)
        // Open descriptors stay under the cap plus room for connections between accept and close.
        let gate = AcceptGate(ceiling: connectionLimit + AcceptGate.headroom)
        // The plain (not the async) bootstrap: accepting a connection starts no task.
        let bootstrap = ServerBootstrap(group: group)
            .serverChannelOption(ChannelOptions.backlog, value: 256)
            .serverChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture { try channel.pipeline.syncOperations.addHandler(gate) }
            }
            .childChannelOption(ChannelOptions.allowRemoteHalfClosure, value: true)
            .childChannelInitializer { acceptor.initialize($0) }
        let channel: any Channel
        var boundPath: String?
        switch endpoint {
        case .path(let path):
            // umask makes the socket 0600 from the moment it exists; chmod repeats it for clarity.
            let old = umask(0o177)
            defer { umask(old) }
            channel = try await bootstrap.bind(unixDomainSocketPath: path, cleanupExistingSocketFile: false).get()
            chmod(path, 0o600)
            boundPath = path
        case .inherited(let fd):
            channel = try await bootstrap.withBoundSocket(NIOBSDSocket.Handle(fd)).get()
        }
        channel.closeFuture.whenComplete { _ in acceptor.stopAccepting() }
        return SocketServer(serverChannel: channel, acceptor: acceptor, gate: gate, dispatcher: dispatcher,
                            boundPath: boundPath)
    }

    /// ``maxConnections``, lowered to leave room under the open-file limit (the agent raises its soft limit to
    /// the hard one at start-up; a low hard limit lowers the cap instead of failing accept()).
    static func connectionLimit() -> Int {
        var limit = rlimit()
        guard getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return maxConnections }
        // 256 spare: the gate's headroom (64) for connections between accept and close, plus the agent's own files.
        return max(16, min(maxConnections, Int(clamping: limit.rlim_cur) - 256))
    }

    public func run() async throws {
        await withGracefulShutdownHandler {
            // Ends once the listening socket is closed and the last connection is gone.
            for await _ in acceptor.drained {}
        } onGracefulShutdown: {
            // Stop accepting, then stop reading from every client: requests already running still get their
            // reply, sign-ins waiting for a person are cancelled, idle connections end.
            self.serverChannel.close(promise: nil)
            self.acceptor.connections.closeInputOfAll()
        }
        try? await serverChannel.close()
        if let boundPath { unlink(boundPath) }
    }
}
