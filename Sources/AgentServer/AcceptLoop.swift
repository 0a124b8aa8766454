#if canImport(Glibc)
import Glibc
#endif
import AgentIPC
import AgentService
import AuthCore
import CAgentSocket
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Logging
import NIOCore
import Synchronization

/// The socket server's connection owner: a thread with an epoll set of its own (one per two cores, sharing the
/// ``ListeningSocket``) that accepts connections, checks the peer (`SO_PEERCRED`, the caller's identity through
/// ``CallerCache``), and then serves each connection for its whole life, the way the C floor of the benchmark serves
/// its lines: no channel, pipeline or future per connection. It reads request lines, answers cached tokens itself
/// (``CachedTokenAnswer``), hands every other request (the request, not the connection) to the async side as a task
/// (``RequestDispatcher/execute(_:caller:emit:)``) whose reply lines come back to this thread as commands, and
/// writes every reply, keeping what the socket does not take until it has room. Each connection's lifecycle (lines,
/// the in-flight cap, back-pressure, half-close, draining) is a pure ``ConnectionStateMachine``; this type does its
/// I/O.
///
/// Shared state lives elsewhere: the ``ConnectionRegistry`` (cap and eviction; its holders close through
/// ``close(_:registration:)``), the ``AcceptGate`` (open descriptors), and the ``ConnectionAcceptor`` (activity, the
/// idle hook, shutdown's drain). Other threads reach the loop only through commands (``close(_:registration:)``,
/// ``closeInput(_:registration:)``, ``stopAccepting()``, ``resumeAccepting()`` and the replies of requests on the
/// async side), which queue a command and wake it.
final class AcceptLoop: ConnectionOwner, @unchecked Sendable {
    /// The longest line ``decode(_:)`` remembers (a plain `token` request is ~50 bytes).
    static let rememberedLine = 256
    /// Accepts per wake-up before the loop serves its connections again (fairness under a connection flood).
    static let acceptBatch = 64
    /// Reply bytes kept for a client that does not read them before its socket is no longer read either.
    static let outputLimit = 64 * 1024

    static let readable = UInt32(AA_SOCKET_READABLE)
    static let writable = UInt32(AA_SOCKET_WRITABLE)
    static let hangup = UInt32(AA_SOCKET_HANGUP)

    enum Command {
        case close(fd: Int32, registration: Int)
        case closeInput(fd: Int32, registration: Int)
        case stopAccepting
        case resumeAccepting
        /// A line written by a request running on the async side; `finished` (its serial) with its final reply.
        case reply(fd: Int32, registration: Int, line: [UInt8], finished: Int?)
    }

    /// A connection this loop owns. A class, so the loop updates it in place.
    final class Connection {
        let registration: Int
        let caller: Caller
        var machine = ConnectionStateMachine(maxLine: WireProtocol.maxMessageBytes,
                                             maxInFlight: SocketServer.maxInFlightPerConnection,
                                             outputLimit: AcceptLoop.outputLimit)
        /// What epoll watches the socket for now (`AA_SOCKET_READABLE`/`WRITABLE` bits).
        var watching = AcceptLoop.readable
        var nextSerial = 0
        /// Requests that wait for a person, by serial: cancelled when the client goes away or half-closes.
        var personTasks: [Int: Task<Void, Never>] = [:]

        init(registration: Int, caller: Caller) {
            self.registration = registration
            self.caller = caller
        }
    }

    let listener: ListeningSocket
    let listenFD: Int32
    let epollFD: Int32
    let wakeFD: Int32
    let acceptor: ConnectionAcceptor
    let gate: AcceptGate
    let logger: Logger
    let myUID = getuid()
    let commands = Mutex<[Command]>([])

    // Touched by the loop's thread only.
    var connections: [Int32: Connection] = [:]
    var accepting = true
    var stopped = false
    /// When the last accept failed for lack of descriptors (EMFILE), accepting waits this long before it tries again.
    var acceptRetry: ContinuousClock.Instant?
    let scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: 16384, alignment: 16)
    var reply = ByteBufferAllocator().buffer(capacity: 512)
    /// The last line this loop decoded as a request, and that request (``decode(_:)``).
    var lastLine: [UInt8] = []
    var lastRequest: WireRequest?
    let dispatcher: RequestDispatcher
    let operations: AgentOperations
    let snapshot: TokenSnapshot

    /// Starts a loop thread that accepts from `listener` (and serves what it accepted).
    init(listener: ListeningSocket, acceptor: ConnectionAcceptor, gate: AcceptGate, logger: Logger) throws(ServerError) {
        let epollFD = aa_socket_epoll_create()
        let wakeFD = aa_socket_wakeup_create()
        // Exclusive: a new connection wakes one loop, not all of them.
        guard epollFD >= 0, wakeFD >= 0, aa_socket_epoll_add(epollFD, wakeFD, 0) == 0,
              aa_socket_epoll_add(epollFD, listener.fd, 1) == 0 else {
            let text = AcceptLoop.errorText()
            if epollFD >= 0 { Glibc.close(epollFD) }
            if wakeFD >= 0 { Glibc.close(wakeFD) }
            throw ServerError(.socket, "cannot set up the accept loop: \(text)")
        }
        self.listener = listener
        self.listenFD = listener.fd
        self.epollFD = epollFD
        self.wakeFD = wakeFD
        self.acceptor = acceptor
        self.gate = gate
        self.logger = logger
        self.dispatcher = acceptor.dispatcher
        self.operations = acceptor.dispatcher.operations
        self.snapshot = acceptor.dispatcher.operations.broker.snapshot
        DetachedThread.start(name: "auth-accept", stackSize: 1 << 20) { [self] in run() }
    }

    deinit {
        scratch.deallocate()
        Glibc.close(epollFD)
        Glibc.close(wakeFD)
    }

    // MARK: - Other threads

    /// Closes the loop's connection `registration` on `fd` (eviction); ignored once it is closed (the descriptor's
    /// number may belong to another connection by then).
    func close(_ fd: Int32, registration: Int) { post(.close(fd: fd, registration: registration)) }

    /// Reads nothing more from the connection (shutdown): what it sent is still answered, then it closes.
    func closeInput(_ fd: Int32, registration: Int) { post(.closeInput(fd: fd, registration: registration)) }

    /// Stops watching the listening socket (the last loop to stop closes it). The loop's thread ends once its last
    /// connection is closed.
    func stopAccepting() { post(.stopAccepting) }

    /// The gate's count fell under its ceiling while accepting was paused.
    func resumeAccepting() { post(.resumeAccepting) }

    func post(_ command: Command) {
        commands.withLock { $0.append(command) }
        _ = aa_socket_wakeup_signal(wakeFD)
    }

    // MARK: - The loop's thread: accepting (serving: AcceptLoop+Serve.swift)

    func run() {
        var fds = [Int32](repeating: 0, count: 64)
        var events = [UInt32](repeating: 0, count: 64)
        while !(stopped && connections.isEmpty) {
            let timeout = acceptRetry.map { max(0, Int32(($0 - .now) / .milliseconds(1))) } ?? -1
            let count = aa_socket_epoll_wait(epollFD, &fds, &events, 64, timeout)
            if count < 0 {
                logger.critical("the accept loop's epoll_wait failed; the socket stops serving",
                                metadata: ["error": "\(AcceptLoop.errorText())"])
                break
            }
            if let retry = acceptRetry, retry <= .now {
                acceptRetry = nil
                resume()
            }
            for index in 0..<Int(count) {
                switch fds[index] {
                case wakeFD: runCommands()
                case listenFD: if accepting { acceptReady() }
                case let fd: if let connection = connections[fd] { ready(fd, connection, events[index]) }
                }
            }
        }
        for fd in Array(connections.keys) { gone(fd) }
        if !stopped { stop() }
    }

    func runCommands() {
        aa_socket_wakeup_drain(wakeFD)
        let pending = commands.withLock { commands -> [Command] in
            defer { commands.removeAll(keepingCapacity: true) }
            return commands
        }
        var written: [Int32: Connection] = [:]
        for command in pending {
            switch command {
            case .close(let fd, let registration):
                guard let connection = connections[fd], connection.registration == registration else { continue }
                gone(fd)
            case .closeInput(let fd, let registration):
                guard let connection = connections[fd], connection.registration == registration else { continue }
                connection.machine.inputEnded()
                cancelPersonTasks(connection)
                drive(fd, connection)
            case .stopAccepting: if !stopped { stop() }
            case .resumeAccepting: resume()
            case .reply(let fd, let registration, let line, let finished):
                guard let connection = connections[fd], connection.registration == registration else { continue }
                if let serial = finished {
                    connection.personTasks[serial] = nil
                    connection.machine.finished()
                    acceptor.connections.end(registration)
                }
                writeLine(fd, connection, line)
                written[fd] = connection
            }
        }
        // After the batch: a connection whose replies all arrived at once is driven (and written) once.
        for (fd, connection) in written where connections[fd] === connection { drive(fd, connection) }
    }

    func stop() {
        stopped = true
        pause()
        listener.loopStopped()
    }

    func pause() {
        guard accepting else { return }
        accepting = false
        _ = aa_socket_epoll_remove(epollFD, listenFD)
    }

    func resume() {
        guard !accepting, !stopped, acceptRetry == nil, gate.resume() else { return }
        accepting = true
        _ = aa_socket_epoll_add(epollFD, listenFD, 1)
    }

    func acceptReady() {
        for _ in 0..<AcceptLoop.acceptBatch where accepting {
            guard gate.reserve() else {
                pause()
                return
            }
            let (fd, accepted, error) = listener.accept()
            if fd >= 0 {
                admit(fd, accepted: accepted)
                continue
            }
            if gate.unreserve() { listener.resumeAccepting() }
            switch error {
            case EAGAIN, EWOULDBLOCK:
                return
            case ECONNABORTED, EPROTO, EPERM:
                continue
            case EMFILE, ENFILE, ENOBUFS, ENOMEM:
                // Out of descriptors or memory: new clients wait in the backlog; try again shortly.
                logger.warning("cannot accept a connection now; retrying in 100 ms",
                               metadata: ["error": "\(String(cString: strerror(error)))"])
                pause()
                acceptRetry = .now + .milliseconds(100)
                return
            default:
                logger.error("accept failed", metadata: ["error": "\(String(cString: strerror(error)))"])
                return
            }
        }
    }

    /// A new connection: the peer check, registration under the cap, the caller's identity, then its lines.
    /// `accepted`: its place in the listening socket's queue (``ListeningSocket/accept()``).
    func admit(_ fd: Int32, accepted: UInt64) {
        var peer = PeerCredentials(pid: 0, uid: 0, gid: 0)
        guard aa_socket_peer_credentials(fd, &peer.pid, &peer.uid, &peer.gid) == 0 else {
            logger.warning("cannot read a connection's peer credentials; closing it",
                           metadata: ["error": "\(AcceptLoop.errorText())"])
            release(fd)
            return
        }
        guard peer.uid == myUID else {
            logger.warning("refused a connection from another user",
                           metadata: ["peer_pid": "\(peer.pid)", "peer_uid": "\(peer.uid)"])
            sendLine(fd, dispatcher.encodeError(nil, WireError(.permissionDenied, "this agent serves uid \(myUID) only")))
            release(fd)
            return
        }
        guard let registration = acceptor.connections.add(.init(owner: self, fd: fd)) else {
            logger.warning("too many connections, all busy: closing a new one", metadata: ["peer_pid": "\(peer.pid)"])
            release(fd)
            return
        }
        acceptor.opened()
        // The pidfd names the process that connected while it is identified, and is closed right after. Not asked
        // for at all when the cache holds that process's /proc/PID/exe link from an earlier connection
        // (Caller.identifyPinned).
        let caller = Caller.identify(peer: peer, via: "socket", pidfd: AcceptLoop.peerPidfd(fd),
                                     cache: acceptor.callers, accepted: accepted, connection: fd)
        let connection = Connection(registration: registration, caller: caller)
        connections[fd] = connection
        if aa_socket_epoll_add(epollFD, fd, 0) != 0 {
            logger.error("cannot watch a new connection; closing it", metadata: ["error": "\(AcceptLoop.errorText())"])
            gone(fd)
            return
        }
        // A client writes its request right after connecting, so by now (the identification took a few system
        // calls) it is usually there: read it at once instead of on epoll's next report (docs/BENCHMARKS.md).
        ready(fd, connection, AcceptLoop.readable)
    }

    static func errorText() -> String { String(cString: strerror(errno)) }

    static func peerPidfd(_ fd: Int32) -> ProcessFD? {
        let pidfd = aa_socket_peer_pidfd(fd)
        return pidfd >= 0 ? ProcessFD(fd: pidfd) : nil
    }
}
