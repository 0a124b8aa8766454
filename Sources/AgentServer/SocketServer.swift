import AgentService
import AgentRuntime
import Glibc
import AgentAccess
import AgentIPC
import CAgentSocket
import Logging
import Synchronization

/// Runs on the accept loop's thread once no client has been connected for a second (and a second after start-up).
public typealias IdleHook = @Sendable () -> Void

/// The agent's Unix socket server: one ``AcceptLoop`` (a thread of its own) accepts every connection, checks the
/// peer, and owns it until it closes: it runs every request as a task of its own, whose replies it writes. A bad or
/// slow client affects only itself.
public final class SocketServer: Sendable {
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

    let loop: AcceptLoop
    let boundPath: String?

    private init(loop: AcceptLoop, boundPath: String?) {
        self.loop = loop
        self.boundPath = boundPath
    }

    /// Starts listening. When this returns, clients can connect (send READY=1 after it). `whenIdle` runs on the
    /// loop's thread when no client has been connected for a second (the agent returns freed heap and the code that
    /// work paged in to the kernel). `connectionLimit` replaces ``connectionLimit()`` (tests use a small one).
    public static func listen(_ endpoint: Endpoint, dispatcher: RequestDispatcher, logger: Logger,
                              activity: ActivityTracker? = nil, whenIdle: IdleHook? = nil,
                              connectionLimit: Int? = nil) async throws -> SocketServer {
        let fd: Int32
        var boundPath: String?
        switch endpoint {
        case .path(let path):
            fd = try SocketServer.bind(path)
            boundPath = path
        case .inherited(let inherited):
            fd = inherited
        }
        do {
            let loop = try AcceptLoop(listenFD: fd, connectionLimit: connectionLimit ?? SocketServer.connectionLimit(),
                                      dispatcher: dispatcher, logger: logger, activity: activity, whenIdle: whenIdle)
            let server = SocketServer(loop: loop, boundPath: boundPath)
            // Before the first connection is accepted: a request that systemd queued before the agent started (the
            // one that started it) may make a grant or a forward at once.
            dispatcher.operations.forwards.attach(server)
            dispatcher.operations.grants.attach(server)
            loop.start()
            return server
        } catch {
            Glibc.close(fd)
            if let boundPath { unlink(boundPath) }
            throw error
        }
    }

    /// A listening Unix socket at `path`, mode 0600 from the moment it exists (the umask bind creates it under). No
    /// chmod after: a grant's directory may be the workload's to write (a writable mount), and by then its path may
    /// name a symlink to a file of the user's, which chmod would follow.
    static func bind(_ path: String) throws(ServerError) -> Int32 {
        guard var address = SocketPath.address(path) else {
            throw ServerError(.socket, "the socket path \(path) is longer than \(SocketPath.maxAddressBytes) bytes")
        }
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw ServerError(.socket, "cannot create a socket: \(String(cString: strerror(errno)))") }
        let old = umask(0o177)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        umask(old)
        // listen right after bind: between the two, the path exists but refuses connections (a client starting
        // alongside the agent would be told it is not running).
        guard bound == 0, Glibc.listen(fd, 256) == 0 else {
            let text = String(cString: strerror(errno))
            Glibc.close(fd)
            if bound == 0 { unlink(path) }
            throw ServerError(.socket, "cannot listen on \(path): \(text)")
        }
        return fd
    }

    /// ``maxConnections``, lowered to leave room under the open-file limit (the agent raises its soft limit to
    /// the hard one at start-up; a low hard limit lowers the cap instead of failing accept()).
    static func connectionLimit() -> Int {
        var limit = rlimit()
        guard getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return maxConnections }
        // 256 spare: a connection being refused or identified (its pidfd), and the agent's own files (the keyring's
        // and the buses' connections, HTTP, a sign-in's redirect listener with up to 64 connections).
        return max(16, min(maxConnections, Int(clamping: limit.rlim_cur) - 256))
    }

    /// Asks the accept loop, the thread that serves every client, to answer probe `number` (the watchdog's
    /// question); ``answeredProbe`` says whether it did.
    public func probe(_ number: UInt64) { loop.post(.probe(number)) }

    /// Work without a client finished (the proactive refresh's round): the idle hook runs a second from now unless a
    /// client is connected (then it runs a second after the last one leaves, as always).
    public func workFinished() { loop.post(.workFinished) }

    /// The number of the last probe the accept loop answered.
    public var answeredProbe: UInt64 { loop.answeredProbe.load(ordering: .relaxed) }

    /// Serves until ``shutdown()`` has ended it: once the listening socket is closed and the last connection is gone.
    public func serve() async {
        for await _ in loop.drained {}
        if let boundPath { unlink(boundPath) }
    }

    /// Stops accepting, then stops reading from every client: requests already running still get their reply,
    /// sign-ins waiting for a person are cancelled, idle connections end; a client that has not taken what it is
    /// owed within AcceptLoop.drainLimit is closed.
    public func shutdown() { loop.post(.shutdown) }
}

/// Doors' sockets (forward sessions', grants') are served by the same loop as the agent's own
/// (``AcceptLoop/acceptDoor(_:door:)``).
extension SocketServer: DoorListeners {
    public func listen(path: String, door: Door) throws(WireError) {
        let fd: Int32
        do { fd = try SocketServer.bind(path) } catch { throw WireError(.internalError, error.message) }
        do {
            try AcceptLoop.prepareListener(fd)
        } catch {
            Glibc.close(fd)
            unlink(path)
            throw WireError(.internalError, "cannot set up the socket at \(path): \(error.message)")
        }
        loop.post(.listen(fd: fd, path: path, door: door))
    }

    public func close(door: Door) {
        loop.post(.unlisten(door: door))
    }

    public func watchExit(of process: ProcessPin, _ exited: @escaping @Sendable () -> Void) {
        let fd = aa_pidfd_open(process.pid)
        // Opened, then checked: the pidfd names the pinned process only if it still ran after it was opened.
        guard fd >= 0, process.isAlive else {
            if fd >= 0 { Glibc.close(fd) }
            Task { exited() }
            return
        }
        loop.post(.watchExit(fd: fd, exited: exited))
    }
}
