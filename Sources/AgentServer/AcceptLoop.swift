import AgentService
import AgentRuntime
import Glibc
import AgentIPC
import AgentAccess
import AuthCore
import CAgentLoop
import CAgentSocket
import Logging
import Synchronization

/// The socket server's one thread: an epoll set that accepts connections, checks each peer (`SO_PEERCRED`, then the
/// caller's identity, read in full by ``Caller/identify(peer:via:pidfd:connection:)``) and then owns the connection
/// for its whole life, the way the C floor of the benchmark serves its lines: no channel, pipeline or future per
/// connection. It hands each request (the request, not the connection) to the async side as a task whose reply lines
/// come back as commands, and writes every reply, keeping what the socket does not take until it has room
/// (AcceptLoop+Serve.swift). Each connection's lifecycle is a pure ``ConnectionStateMachine``; this type does its I/O.
///
/// Everything the connections share lives on this thread, so none of it needs a lock: the connection cap with its
/// eviction order, and the idle hook's timer. Other threads reach the loop only through ``post(_:)``. One loop serves
/// a desktop's clients many times over (docs/BENCHMARKS.md): more loops would need all of the above shared between
/// threads.
final class AcceptLoop: @unchecked Sendable {
    /// Accepts per wake-up before the loop serves its connections again (fairness under a connection flood).
    static let acceptBatch = 64
    /// Reply bytes kept for a client that does not read them before its socket is no longer read either.
    static let outputLimit = 64 * 1024
    /// How long the last connection must be gone before the idle hook runs; at most one run per this period, so a
    /// client that connects once per request does not pay for it (nanoseconds, as the loop's timers).
    static let idleHookDelay: UInt64 = 1_000_000_000
    /// The idle hook runs once more this long after its first run (31 s after the work), unless a client came in
    /// between: by then the HTTP client has closed the connections the work left open
    /// (``HTTPClientTransport/idleConnectionLifetime``, 30 s), and closing them mapped code again (NIO's channel
    /// teardown; docs/BENCHMARKS.md, "Memory").
    static let idleHookAgain: UInt64 = 30_000_000_000
    /// After shutdown began, how long clients have to take the replies still owed to them; then their connections
    /// close (a client that never reads, a stopped process, must not hold the agent's exit up). Also how long a
    /// refused connection has to take its refusal (``refuseOtherSender(_:_:sender:_:)``). Nanoseconds.
    static let drainLimit: UInt64 = 3_000_000_000
    /// Confined callers (``ClientIdentity/isConfined``: sandboxed apps, forwarded hosts) share one part in this many
    /// of the connection cap (a quarter), so that they cannot fill it and lock out the desktop's own programs.
    static let confinedShare = 4

    static let readable = UInt32(AA_SOCKET_READABLE)
    static let writable = UInt32(AA_SOCKET_WRITABLE)
    static let hangup = UInt32(AA_SOCKET_HANGUP)

    enum Command {
        /// A line written by a request running on the async side; `finished` (its serial) with its final reply.
        case reply(fd: Int32, registration: Int, line: [UInt8], finished: Int?)
        /// Stop accepting and stop reading every client: what they sent is still answered, then they close.
        case shutdown
        /// The watchdog's question: the loop answers by storing the number in ``answeredProbe``. A loop that is stuck
        /// (in a system call that never returns, say) never does.
        case probe(UInt64)
        /// Work that ran without a client (the proactive refresh's round) finished: the idle hook runs a second from
        /// now, as it does after the last client, so what that work mapped is handed back too.
        case workFinished
        /// Serve `fd`, listening at `path`, as `door`'s socket (a forward session's, a grant's).
        case listen(fd: Int32, path: String, door: Door)
        /// Close `door`'s socket and every connection made through it.
        case unlisten(door: Door)
        /// Call `exited` when the process of pidfd `fd` exits (a grant tied to it).
        case watchExit(fd: Int32, exited: @Sendable () -> Void)
    }

    /// A connection this loop owns. A class, so the loop updates it in place.
    final class Connection {
        let registration: Int
        let caller: Caller
        /// The door (a forward session's or a grant's socket) it came through; nil for the agent's own socket.
        let door: Door?
        /// Its caller is confined (``ClientIdentity/isConfined``): counted in ``AcceptLoop/confinedQuota``.
        let confined: Bool
        var machine = ConnectionStateMachine(maxLine: WireProtocol.maxMessageBytes,
                                             maxInFlight: SocketServer.maxInFlightPerConnection,
                                             outputLimit: AcceptLoop.outputLimit)
        /// What epoll watches the socket for now (`AA_SOCKET_READABLE`/`WRITABLE` bits).
        var watching = AcceptLoop.readable
        /// When it was last active (registered, a request started, ended or was answered at once), in the loop's
        /// ``AcceptLoop/order``: at the cap, the idle connection with the lowest value makes room.
        var lastActive: Int
        var nextSerial = 0
        /// Requests cancelled when their client goes away, by serial: those that wait for a person (`person`: also
        /// when it half-closes), and those whose work only their reply uses (``RequestDispatcher/onlyForItsReply(_:)``),
        /// so a client that asks and hangs up again and again cannot pile up work beyond the 16 requests a
        /// connection may have in flight.
        var cancellable: [Int: (task: Task<Void, Never>, person: Bool)] = [:]

        init(registration: Int, caller: Caller, door: Door?) {
            self.registration = registration
            self.caller = caller
            self.door = door
            self.confined = caller.identity.isConfined
            self.lastActive = registration
        }
    }

    let listenFD: Int32
    let epollFD: Int32
    let wakeFD: Int32
    /// At most this many connections; at the cap the one idle longest is closed, and when all are busy the new one
    /// is refused with `agent_busy` (SECURITY.md 22). Confined callers have ``confinedQuota`` of them.
    let connectionLimit: Int
    /// How many connections confined callers may hold together (``confinedShare``).
    var confinedQuota: Int { max(1, connectionLimit / AcceptLoop.confinedShare) }
    let dispatcher: RequestDispatcher
    let logger: Logger
    /// Told about every served connection, for the idle exit.
    let activity: ActivityTracker?
    let whenIdle: IdleHook?
    let myUID = getuid()
    let commands = Mutex<[Command]>([])
    /// The last ``Command/probe(_:)`` the loop ran (read by the watchdog on another thread).
    let answeredProbe = Atomic<UInt64>(0)
    /// Open connections, and the most there ever were at once (read by tests on other threads).
    let openConnections = Atomic<Int>(0)
    let peakConnections = Atomic<Int>(0)
    /// Finishes once the loop stopped accepting and the last connection is gone (``SocketServer/run()`` waits).
    let drained: AsyncStream<Never>
    private let finishDrained: AsyncStream<Never>.Continuation

    // Touched by the loop's thread only.
    var connections: [Int32: Connection] = [:]
    /// How many of them are confined callers'.
    var confinedConnections = 0
    /// Doors' listening sockets (forward sessions', grants'): descriptor -> door and path.
    var doorListeners: [Int32: (door: Door, path: String)] = [:]
    /// Pidfds of processes whose exit ends something (a grant): descriptor -> what to do then.
    var exitWatches: [Int32: @Sendable () -> Void] = [:]
    var accepting = true
    var stopped = false
    /// A counter for registrations and activity: the eviction order.
    var order = 0
    // The loop's timers, in ``monotonicNow()``'s nanoseconds: plain integers, because every wake-up reads them
    // (`ContinuousClock.Instant` is a resilient type: an optional one is copied and compared through its value
    // witnesses).
    /// When the last accept failed for lack of descriptors (EMFILE), accepting waits this long before it tries again.
    var acceptRetry: UInt64?
    /// When the idle hook runs: a second after the last connection closed, unless a client connects first.
    var idleAt: UInt64?
    /// The hook's next run is its first since work: ``idleHookAgain`` after it, it runs once more.
    var idleFirstRun = false
    /// When shutdown stops waiting for clients to take their replies (``drainLimit`` after it began).
    var drainBy: UInt64?
    /// Refused connections, by registration, each closed at `closeBy` (``drainLimit`` after its refusal) unless its
    /// client took the refusal first; in refusal order, so the first is the soonest.
    var refused: [(fd: Int32, registration: Int, closeBy: UInt64)] = []
    let scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: 16384, alignment: 16)

    /// Sets the loop up on `listenFD` (bound and listening; the loop owns it from now on); ``start()`` starts its
    /// thread, once whatever its connections reach is in place.
    init(listenFD: Int32, connectionLimit: Int, dispatcher: RequestDispatcher, logger: Logger,
         activity: ActivityTracker?, whenIdle: IdleHook?) throws(ServerError) {
        try AcceptLoop.prepareListener(listenFD)
        let epollFD = aa_socket_epoll_create()
        let wakeFD = aa_loop_wakeup_create()
        guard epollFD >= 0, wakeFD >= 0, aa_socket_epoll_add(epollFD, wakeFD, 0) == 0,
              aa_socket_epoll_add(epollFD, listenFD, 0) == 0 else {
            let text = AcceptLoop.errorText()
            if epollFD >= 0 { Glibc.close(epollFD) }
            if wakeFD >= 0 { Glibc.close(wakeFD) }
            throw ServerError(.socket, "cannot set up the accept loop: \(text)")
        }
        self.listenFD = listenFD
        self.epollFD = epollFD
        self.wakeFD = wakeFD
        self.connectionLimit = connectionLimit
        self.dispatcher = dispatcher
        self.logger = logger
        self.activity = activity
        self.whenIdle = whenIdle
        (drained, finishDrained) = AsyncStream.makeStream(of: Never.self)
        // The idle hook runs a second after start-up unless a client comes first: what start-up mapped and
        // allocated (configuration, the keyring, D-Bus) is given back even if no client ever connects.
        armIdleHook()
    }

    /// Starts the loop's thread: connections are accepted from now on (systemd may have queued some already).
    func start() {
        DetachedThread.start(name: "auth-accept", stackSize: 1 << 20) { [self] in run() }
    }

    /// What the loop needs of every socket it listens on (the agent's, a forward session's): non-blocking, and
    /// SO_PASSCRED, so that every message carries its sender's pid, checked against the connecting process (`read`).
    static func prepareListener(_ fd: Int32) throws(ServerError) {
        let flags = fcntl(fd, F_GETFL)
        guard flags >= 0, fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0 else {
            throw ServerError(.socket, "cannot make the listening socket non-blocking: \(AcceptLoop.errorText())")
        }
        guard aa_socket_pass_credentials(fd) == 0 else {
            throw ServerError(.socket, "cannot ask for the senders of messages (SO_PASSCRED): \(AcceptLoop.errorText())")
        }
    }

    deinit {
        scratch.deallocate()
        Glibc.close(epollFD)
        Glibc.close(wakeFD)
    }

    /// Queues a command for the loop's thread and wakes it (from any thread).
    func post(_ command: Command) {
        commands.withLock { $0.append(command) }
        _ = aa_loop_wakeup_signal(wakeFD)
    }

    // MARK: - The loop's thread: accepting, timers, commands (serving: AcceptLoop+Serve.swift)

    func run() {
        var fds = [Int32](repeating: 0, count: 64)
        var events = [UInt32](repeating: 0, count: 64)
        while !(stopped && connections.isEmpty) {
            // No timer while clients are connected and accepting works: then the clock is not read at all.
            let timer = min(acceptRetry ?? .max, idleAt ?? .max, drainBy ?? .max, refused.first?.closeBy ?? .max)
            let timeout = timer == .max ? -1
                : Int32(clamping: (timer - min(timer, AcceptLoop.monotonicNow()) + 999_999) / 1_000_000)
            let count = aa_socket_epoll_wait(epollFD, &fds, &events, 64, timeout)
            if count < 0 {
                logger.critical("the accept loop's epoll_wait failed; the socket stops serving",
                                metadata: ["error": "\(AcceptLoop.errorText())"])
                break
            }
            if timer != .max { timers(now: AcceptLoop.monotonicNow()) }
            for index in 0..<Int(count) {
                switch fds[index] {
                case wakeFD: runCommands()
                case listenFD: if accepting { acceptReady() }
                case let fd:
                    if let connection = connections[fd] { ready(fd, connection, events[index]) }
                    else if accepting, let listener = doorListeners[fd] { acceptDoor(fd, door: listener.door) }
                    else if let exited = exitWatches.removeValue(forKey: fd) {
                        _ = aa_socket_epoll_remove(epollFD, fd)
                        Glibc.close(fd)
                        Task { exited() }
                    }
                }
            }
        }
        closeAll()
        if !stopped { stopAccepting() }
        finishDrained.finish()
    }

    func timers(now: UInt64) {
        if let retry = acceptRetry, retry <= now {
            acceptRetry = nil
            watchListener(true)
        }
        if let drain = drainBy, drain <= now {
            drainBy = nil
            if !connections.isEmpty {
                logger.notice("shutting down: closing connections whose clients did not take their replies",
                              metadata: ["connections": "\(connections.count)"])
            }
            closeAll()
        }
        while let first = refused.first, first.closeBy <= now {
            refused.removeFirst()
            guard connections[first.fd]?.registration == first.registration else { continue }
            logger.notice("closing a refused connection whose client did not take the refusal")
            gone(first.fd)
        }
        guard let idle = idleAt, idle <= now else { return }
        idleAt = idleFirstRun ? now + AcceptLoop.idleHookAgain : nil
        idleFirstRun = false
        guard !stopped else { return }
        whenIdle?()
    }

    /// Work ended (the last client left, start-up, a proactive refresh round): the idle hook runs a second from now,
    /// and once more ``idleHookAgain`` after that.
    func armIdleHook() {
        idleAt = AcceptLoop.monotonicNow() + AcceptLoop.idleHookDelay
        idleFirstRun = true
    }

    func runCommands() {
        aa_loop_wakeup_drain(wakeFD)
        let pending = commands.withLock { commands -> [Command] in
            defer { commands.removeAll(keepingCapacity: true) }
            return commands
        }
        var written: [Int32: Connection] = [:]
        for command in pending {
            switch command {
            case .shutdown:
                guard !stopped else { continue }
                stopAccepting()
                drainBy = AcceptLoop.monotonicNow() + AcceptLoop.drainLimit
                for (fd, connection) in connections {
                    connection.machine.inputEnded()
                    cancelTasks(connection, personOnly: true)
                    written[fd] = connection
                }
            case .probe(let number):
                answeredProbe.store(number, ordering: .relaxed)
            case .workFinished:
                if connections.isEmpty { armIdleHook() }
            case .listen(let fd, let path, let door):
                // While accepting is paused (out of descriptors) it is watched once accepting resumes.
                guard !stopped, !accepting || aa_socket_epoll_add(epollFD, fd, 0) == 0 else {
                    Glibc.close(fd)
                    if case .forward = door { unlink(path) }
                    continue
                }
                doorListeners[fd] = (door, path)
            case .unlisten(let door):
                unlisten { $0 == door }
            case .watchExit(let fd, let exited):
                guard aa_socket_epoll_add(epollFD, fd, 0) == 0 else {
                    Glibc.close(fd)
                    continue
                }
                exitWatches[fd] = exited
            case .reply(let fd, let registration, let line, let finished):
                guard let connection = connections[fd], connection.registration == registration else { continue }
                if let serial = finished {
                    connection.cancellable[serial] = nil
                    connection.machine.finished()
                    touch(connection)
                }
                writeLine(fd, connection, line)
                written[fd] = connection
            }
        }
        // After the batch: a connection whose replies all arrived at once is driven (and written) once.
        for (fd, connection) in written where connections[fd] === connection { drive(fd, connection) }
    }

    func closeAll() {
        for fd in Array(connections.keys) { gone(fd) }
    }

    /// Closes the listening socket: new clients get `ECONNREFUSED` (or wait for socket activation's next start).
    func stopAccepting() {
        stopped = true
        watchListener(false)
        Glibc.close(listenFD)
        unlisten { _ in true }
        for fd in exitWatches.keys {
            _ = aa_socket_epoll_remove(epollFD, fd)
            Glibc.close(fd)
        }
        exitWatches.removeAll()
    }

    /// Closes the sockets of the doors `which` picks and the connections made through them (their requests in
    /// flight finish; those waiting for a person are withdrawn). A forward session's path is removed here; a grant's
    /// is removed by ``Grants`` when it ends, and stays when the agent stops, to be bound again by the next run.
    func unlisten(_ which: (Door) -> Bool) {
        for (fd, listener) in doorListeners where which(listener.door) {
            _ = aa_socket_epoll_remove(epollFD, fd)
            Glibc.close(fd)
            if case .forward = listener.door { unlink(listener.path) }
            doorListeners[fd] = nil
            for (connectionFD, connection) in connections where connection.door == listener.door {
                gone(connectionFD)
            }
        }
    }

    /// Accepts on a door's socket: each connection is admitted only as what the door says (a forward session's ssh,
    /// a grant). Out of descriptors, every listening socket pauses, as for the agent's own (a level-triggered
    /// listener would spin).
    func acceptDoor(_ listener: Int32, door: Door) {
        for _ in 0..<AcceptLoop.acceptBatch where accepting {
            let fd = aa_socket_accept(listener)
            if fd >= 0 {
                admit(fd, door: door)
                continue
            }
            switch errno {
            case ECONNABORTED, EPROTO, EPERM: continue
            case EMFILE, ENFILE, ENOBUFS, ENOMEM: return pauseAccepting()
            default: return
            }
        }
    }

    /// Watches (or stops watching) every listening socket: the agent's and the doors'.
    func watchListener(_ on: Bool) {
        guard on != accepting, !stopped || !on else { return }
        accepting = on
        for fd in [listenFD] + doorListeners.keys {
            _ = on ? aa_socket_epoll_add(epollFD, fd, 0) : aa_socket_epoll_remove(epollFD, fd)
        }
    }

    /// Out of descriptors or memory: new clients wait in the backlogs; accepting tries again shortly.
    func pauseAccepting() {
        logger.warning("cannot accept a connection now; retrying in 100 ms", metadata: ["error": "\(AcceptLoop.errorText())"])
        watchListener(false)
        acceptRetry = AcceptLoop.monotonicNow() + 100_000_000
    }

    func acceptReady() {
        for _ in 0..<AcceptLoop.acceptBatch where accepting {
            let fd = aa_socket_accept(listenFD)
            if fd >= 0 {
                admit(fd)
                continue
            }
            switch errno {
            case EAGAIN, EWOULDBLOCK:
                return
            case ECONNABORTED, EPROTO, EPERM:
                continue
            case EMFILE, ENFILE, ENOBUFS, ENOMEM:
                return pauseAccepting()
            default:
                logger.error("accept failed", metadata: ["error": "\(AcceptLoop.errorText())"])
                return
            }
        }
    }

    /// A new connection: the peer check, the caller's identity, room under the cap, then its lines.
    func admit(_ fd: Int32, door: Door? = nil) {
        var peer = PeerCredentials(pid: 0, uid: 0, gid: 0)
        guard aa_socket_peer_credentials(fd, &peer.pid, &peer.uid, &peer.gid) == 0 else {
            logger.warning("cannot read a connection's peer credentials; closing it",
                           metadata: ["error": "\(AcceptLoop.errorText())"])
            return release(fd)
        }
        guard peer.uid == myUID else {
            logger.warning("refused a connection from another user",
                           metadata: ["peer_pid": "\(peer.pid)", "peer_uid": "\(peer.uid)"])
            sendLine(fd, dispatcher.encodeError(nil, WireError(.permissionDenied, "this agent serves uid \(myUID) only")))
            return release(fd)
        }
        // The pidfd names the process that connected while it is identified, and is closed right after: a
        // connection costs one descriptor, not two. Identified before the cap is applied, which depends on who it is.
        var caller = Caller.identify(peer: peer, via: "socket", pidfd: AcceptLoop.peerPidfd(fd), connection: fd)
        if let door {
            let admitted = switch door {
            case .forward(let session): dispatcher.operations.forwards.admit(caller, session: session)
            case .grant(let name): dispatcher.operations.grants.admit(caller, grant: name)
            }
            switch admitted {
            case .success(let admitted): caller = admitted
            case .failure(let error):
                logger.warning("refused a connection to a forward's or grant's socket", metadata: [
                    "peer_pid": "\(peer.pid)", "peer_exe": "\(caller.exe ?? "unknown")", "reason": "\(error.message)"])
                sendLine(fd, dispatcher.encodeError(nil, error))
                return release(fd)
            }
        }
        if let busy = makeRoom(confined: caller.identity.isConfined) {
            logger.warning("too many connections: refusing a new one", metadata: [
                "peer_pid": "\(peer.pid)", "confined": "\(caller.identity.isConfined)", "reason": "\(busy.message)"])
            sendLine(fd, dispatcher.encodeError(nil, busy))
            return release(fd)
        }
        order += 1
        let connection = Connection(registration: order, caller: caller, door: door)
        connections[fd] = connection
        if connection.confined { confinedConnections += 1 }
        // Not idle: the idle hook's second starts again when the last connection is gone (the work done so far
        // still counts then).
        idleAt = nil
        _ = peakConnections.max(openConnections.add(1, ordering: .relaxed).newValue, ordering: .relaxed)
        activity?.begin()
        guard aa_socket_epoll_add(epollFD, fd, 0) == 0 else {
            logger.error("cannot watch a new connection; closing it", metadata: ["error": "\(AcceptLoop.errorText())"])
            return gone(fd)
        }
        // A client writes its request right after connecting, so by now (the identification took a few system
        // calls) it is usually there: read it at once instead of on epoll's next report (docs/BENCHMARKS.md).
        ready(fd, connection, AcceptLoop.readable)
    }

    /// Room for a new connection, or the `agent_busy` refusal it gets. A confined caller's (``confinedQuota``
    /// reached) is refused at once. At the cap, a program of the desktop has the oldest confined connection closed
    /// for it, busy or not (its request waiting for a person is withdrawn), so sandboxed apps and forwarded hosts
    /// never keep it out; otherwise the connection idle longest (no request in flight) makes room. When every
    /// connection is busy and none is confined's to take, the new one is refused. Idle clients, however many,
    /// cannot keep a real client from being served.
    func makeRoom(confined: Bool) -> WireError? {
        if confined, confinedConnections >= confinedQuota {
            return WireError(.agentBusy,
                "auth-agent has \(confinedConnections) connections of sandboxed apps and forwarded hosts open, the most it takes from them at once (a quarter of its \(connectionLimit)); try again shortly",
                retryAfter: 1)
        }
        guard connections.count >= connectionLimit else { return nil }
        let oldestConfined = confined || confinedConnections == 0 ? nil
            : connections.lazy.filter { $0.value.confined }.min(by: { $0.value.registration < $1.value.registration })
        guard let victim = oldestConfined ?? connections.lazy.filter({ $0.value.machine.inFlight == 0 })
            .min(by: { $0.value.lastActive < $1.value.lastActive }) else {
            return WireError(.agentBusy,
                "auth-agent has \(connectionLimit) connections open, each with a request in flight; try again shortly",
                retryAfter: 1)
        }
        gone(victim.key)
        return nil
    }

    /// The connection was active: it moves to the back of the eviction order.
    func touch(_ connection: Connection) {
        order += 1
        connection.lastActive = order
    }

    static func errorText() -> String { String(cString: strerror(errno)) }

    /// CLOCK_MONOTONIC in nanoseconds, the loop's timers' clock.
    static func monotonicNow() -> UInt64 { aa_loop_monotonic_ns() }

    static func peerPidfd(_ fd: Int32) -> ProcessFD? {
        let pidfd = aa_socket_peer_pidfd(fd)
        return pidfd >= 0 ? ProcessFD(fd: pidfd) : nil
    }
}
