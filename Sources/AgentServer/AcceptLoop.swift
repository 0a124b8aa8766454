#if canImport(Glibc)
import Glibc
#endif
import AgentIPC
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

    private static let readable = UInt32(AA_SOCKET_READABLE)
    private static let writable = UInt32(AA_SOCKET_WRITABLE)
    private static let hangup = UInt32(AA_SOCKET_HANGUP)

    private enum Command {
        case close(fd: Int32, registration: Int)
        case closeInput(fd: Int32, registration: Int)
        case stopAccepting
        case resumeAccepting
        /// A line written by a request running on the async side; `finished` (its serial) with its final reply.
        case reply(fd: Int32, registration: Int, line: [UInt8], finished: Int?)
    }

    /// A connection this loop owns. A class, so the loop updates it in place.
    private final class Connection {
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

    private let listener: ListeningSocket
    private let listenFD: Int32
    private let epollFD: Int32
    private let wakeFD: Int32
    private let acceptor: ConnectionAcceptor
    private let gate: AcceptGate
    private let logger: Logger
    private let myUID = getuid()
    private let commands = Mutex<[Command]>([])

    // Touched by the loop's thread only.
    private var connections: [Int32: Connection] = [:]
    private var accepting = true
    private var stopped = false
    /// When the last accept failed for lack of descriptors (EMFILE), accepting waits this long before it tries again.
    private var acceptRetry: ContinuousClock.Instant?
    private let scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: 16384, alignment: 16)
    private var reply = ByteBufferAllocator().buffer(capacity: 512)
    /// The last line this loop decoded as a request, and that request (``decode(_:)``).
    private var lastLine: [UInt8] = []
    private var lastRequest: WireRequest?
    private let dispatcher: RequestDispatcher
    private let operations: AgentOperations
    private let snapshot: TokenSnapshot

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

    private func post(_ command: Command) {
        commands.withLock { $0.append(command) }
        _ = aa_socket_wakeup_signal(wakeFD)
    }

    // MARK: - The loop's thread

    private func run() {
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

    private func runCommands() {
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
            case .reply(let fd, let registration, var line, let finished):
                guard let connection = connections[fd], connection.registration == registration else { continue }
                if let serial = finished {
                    connection.personTasks[serial] = nil
                    connection.machine.finished()
                    acceptor.connections.end(registration)
                }
                line.append(0x0A)
                line.withUnsafeBytes { write(fd, connection, $0) }
                written[fd] = connection
            }
        }
        // After the batch: a connection whose replies all arrived at once is driven (and written) once.
        for (fd, connection) in written where connections[fd] === connection { drive(fd, connection) }
    }

    private func stop() {
        stopped = true
        pause()
        listener.loopStopped()
    }

    private func pause() {
        guard accepting else { return }
        accepting = false
        _ = aa_socket_epoll_remove(epollFD, listenFD)
    }

    private func resume() {
        guard !accepting, !stopped, acceptRetry == nil, gate.resume() else { return }
        accepting = true
        _ = aa_socket_epoll_add(epollFD, listenFD, 1)
    }

    private func acceptReady() {
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
    private func admit(_ fd: Int32, accepted: UInt64) {
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

    /// epoll reported the connection (or `admit` guesses it is readable): read, serve, write, watch or close.
    /// `events` may be stale (a descriptor closed and reused in the same batch), so each is checked by what the
    /// socket does, not trusted.
    private func ready(_ fd: Int32, _ connection: Connection, _ events: UInt32) {
        if events & (AcceptLoop.readable | AcceptLoop.hangup) != 0, connection.machine.wantsRead {
            // A hang-up with input still queued: that input is read and served first (a client may write a request
            // and close without waiting for the reply); the end of input comes with a later read.
            read(fd, connection)
        } else if events & AcceptLoop.hangup != 0, aa_socket_hung_up(fd) == 1 {
            // The client is gone (not merely half-closed) and nothing more is read: its replies have nowhere to go.
            return gone(fd)
        }
        if connection.machine.state == .closed { return }
        drive(fd, connection)
    }

    /// One read. One read never joins two writers' bytes (SO_PASSCRED, set on the listening socket): `sender` wrote
    /// all. 0: the bytes carry no sender. They were queued before the agent set SO_PASSCRED (a socket-activated agent
    /// starting), so they were written before the agent could look at the connection at all: taken as the
    /// connecting process's, which gives a writer nothing it could not get by writing before its own exec
    /// (docs/SECURITY.md). (A writer in a pid namespace the agent cannot see also reads as 0.)
    private func read(_ fd: Int32, _ connection: Connection) {
        var sender: Int32 = 0
        let count = aa_socket_receive_from(fd, scratch.baseAddress, UInt(scratch.count), &sender)
        if count > 0, sender != 0, sender != connection.caller.pid {
            refuseOtherSender(fd, connection, sender: sender, UnsafeRawBufferPointer(rebasing: scratch[..<Int(count)]))
        } else if count > 0 {
            connection.machine.received(UnsafeRawBufferPointer(rebasing: scratch[..<Int(count)]))
        } else if count == 0 {
            // The client is done sending: requests that only answer still get their reply; those that wait for a
            // person are withdrawn.
            connection.machine.inputEnded()
            cancelPersonTasks(connection)
        } else if errno != EAGAIN, errno != EWOULDBLOCK {
            gone(fd)
        }
    }

    /// Serves the complete lines the machine gives out, writes what is pending, then closes the connection if it is
    /// finished or sets what epoll watches it for.
    private func drive(_ fd: Int32, _ connection: Connection) {
        // Writing can make room for lines held back by unread output: serve those too, until neither moves.
        repeat {
            serveLines(fd, connection)
            if connection.machine.state == .closed { return }
            flush(fd, connection)
            if connection.machine.state == .closed { return }
        } while connection.machine.canServe
        if connection.machine.isFinished {
            closeConnection(fd)
            return
        }
        let wanted = (connection.machine.wantsRead ? AcceptLoop.readable : 0)
            | (connection.machine.wantsWrite ? AcceptLoop.writable : 0)
        guard wanted != connection.watching else { return }
        guard aa_socket_epoll_watch(epollFD, fd, wanted) == 0 else {
            logger.error("cannot watch a connection; closing it", metadata: ["error": "\(AcceptLoop.errorText())"])
            gone(fd)
            return
        }
        connection.watching = wanted
    }

    private func serveLines(_ fd: Int32, _ connection: Connection) {
        while connection.machine.state != .closed {
            switch connection.machine.nextLine() {
            case .none:
                return
            case .tooLong:
                let error = WireError(.messageTooLarge,
                                      "a request line exceeded \(WireProtocol.maxMessageBytes) bytes; closing the connection")
                writeLine(fd, connection, dispatcher.encodeError(nil, error))
            case .line(let line):
                serve(fd, connection, line)
            }
        }
    }

    /// One request line: answered here from the snapshot, answered here as an error, or started on the async side.
    private func serve(_ fd: Int32, _ connection: Connection, _ line: [UInt8]) {
        let decoded = line.withUnsafeBytes { decode($0) }
        guard case .request(let request) = decoded else {
            if case .invalid(let id, let error) = decoded { writeLine(fd, connection, dispatcher.encodeError(id, error)) }
            return
        }
        reply.clear()
        guard CachedTokenAnswer.answer(request, caller: connection.caller, operations: operations, snapshot: snapshot,
                                       into: &reply) else {
            start(request, fd, connection)
            return
        }
        // Before the reply leaves: a client that reads it and connects again must find this connection already
        // more recently used than the new one's neighbours (the eviction order).
        acceptor.connections.touch(connection.registration)
        reply.withUnsafeReadableBytes { write(fd, connection, $0) }
    }

    /// Runs `request` as a task of its own; its event lines and its reply come back as commands.
    private func start(_ request: WireRequest, _ fd: Int32, _ connection: Connection) {
        acceptor.slowRequests.add(1, ordering: .relaxed)
        connection.machine.started()
        acceptor.connections.begin(connection.registration)
        connection.nextSerial += 1
        let (serial, registration, caller, dispatcher) = (connection.nextSerial, connection.registration,
                                                          connection.caller, self.dispatcher)
        let task = Task { [self] in
            let reply = await dispatcher.execute(request, caller: caller) { line in
                self.post(.reply(fd: fd, registration: registration, line: line, finished: nil))
            }
            post(.reply(fd: fd, registration: registration, line: reply, finished: serial))
        }
        if dispatcher.waitsForPerson(request) { connection.personTasks[serial] = task }
    }

    /// The request on `line`, decoded. Clients send the same bytes again and again (`authctl token work`, a mail
    /// client's token command, a script in a loop): a line equal to the last request decoded here gives that request
    /// again without decoding (the decoder is a pure function of the bytes).
    private func decode(_ line: UnsafeRawBufferPointer) -> WireRequest.Decoded {
        if let last = lastRequest, line.count == lastLine.count, line.count > 0,
           lastLine.withUnsafeBytes({ memcmp($0.baseAddress!, line.baseAddress!, line.count) == 0 }) {
            return .request(last)
        }
        let decoded = WireRequest.decode(bytes: line)
        if case .request(let request) = decoded, line.count <= AcceptLoop.rememberedLine {
            lastLine = Array(line)
            lastRequest = request
        }
        return decoded
    }

    /// Bytes on this connection were written by another process than the one that connected (which passed the
    /// socket on, or forked a helper that kept it and then ran an allowed program): the connecting process's
    /// identity says nothing about the writer, so nothing it asks is served, whatever the account's policy. The
    /// client gets `permission_denied`, the refusal is logged and audited (for the account its line names, if
    /// any), and the connection is closed.
    private func refuseOtherSender(_ fd: Int32, _ connection: Connection, sender: Int32, _ bytes: UnsafeRawBufferPointer) {
        var request: WireRequest?
        if let newline = bytes.firstIndex(of: 0x0A),
           case .request(let decoded) = WireRequest.decode(bytes: UnsafeRawBufferPointer(rebasing: bytes[..<newline])) {
            request = decoded
        }
        var metadata = AgentOperations.requestMetadata(.token, account: request?.account, caller: connection.caller)
        metadata["operation"] = request.map { "\($0.op)" }
        metadata["sender_pid"] = "\(sender)"
        logger.warning("refused a request written by another process than the one that connected", metadata: metadata)
        if let account = request?.account {
            operations.access.record(connection.caller, account: account, granted: false, reason: .otherSender,
                                     scopes: request?.scopes, resource: request?.resource)
        }
        sendLine(fd, dispatcher.encodeError(request?.id, WireError(.permissionDenied,
            "this connection was opened by pid \(connection.caller.pid), but pid \(sender) wrote to it: requests are taken only from the process that connected")))
        gone(fd)
    }

    // MARK: - Writing and closing

    private func writeLine(_ fd: Int32, _ connection: Connection, _ line: [UInt8]) {
        var line = line
        line.append(0x0A)
        line.withUnsafeBytes { write(fd, connection, $0) }
    }

    /// Sends `bytes` now if nothing is waiting before them, and keeps what the socket does not take.
    private func write(_ fd: Int32, _ connection: Connection, _ bytes: UnsafeRawBufferPointer) {
        guard connection.machine.state != .closed else { return }
        guard connection.machine.pendingOutputCount == 0 else {
            connection.machine.queue(bytes)
            return
        }
        let sent = aa_socket_send(fd, bytes.baseAddress, UInt(bytes.count))
        if sent < 0 {
            guard errno == EAGAIN || errno == EWOULDBLOCK else { return gone(fd) }
            connection.machine.queue(bytes)
        } else if sent < bytes.count {
            connection.machine.queue(UnsafeRawBufferPointer(rebasing: bytes[sent...]))
        }
    }

    /// Sends what is pending, as much as the socket takes.
    private func flush(_ fd: Int32, _ connection: Connection) {
        guard connection.machine.pendingOutputCount > 0 else { return }
        let sent = connection.machine.withPendingOutput { aa_socket_send(fd, $0.baseAddress, UInt($0.count)) }
        if sent < 0 {
            if errno != EAGAIN, errno != EWOULDBLOCK { gone(fd) }
            return
        }
        connection.machine.wrote(sent)
    }

    /// A line to a descriptor that is not (or no longer) a served connection: best effort, never waits.
    private func sendLine(_ fd: Int32, _ bytes: [UInt8]) {
        var line = bytes
        line.append(0x0A)
        _ = line.withUnsafeBytes { aa_socket_send(fd, $0.baseAddress, UInt($0.count)) }
    }

    private func cancelPersonTasks(_ connection: Connection) {
        for task in connection.personTasks.values { task.cancel() }
        connection.personTasks = [:]
    }

    /// The client hung up, the socket failed, or the connection is evicted: closed now. Requests in flight finish
    /// (a refresh's result is cached) and their replies are dropped; those waiting for a person are withdrawn.
    private func gone(_ fd: Int32) {
        guard let connection = connections[fd] else { return }
        connection.machine.hungUp()
        cancelPersonTasks(connection)
        closeConnection(fd)
    }

    private func closeConnection(_ fd: Int32) {
        guard let connection = connections.removeValue(forKey: fd) else { return }
        Glibc.close(fd)
        acceptor.closed(connection.registration)
        released()
    }

    /// Closes a descriptor that never became a connection (refused). What the client already sent is read first:
    /// closing a Unix socket with unread input resets it, and the client could lose the refusal line.
    private func release(_ fd: Int32) {
        _ = aa_socket_receive(fd, scratch.baseAddress, UInt(scratch.count))
        Glibc.close(fd)
        released()
    }

    /// An accepted descriptor was closed.
    private func released() {
        if gate.closed() { listener.resumeAccepting() }
    }

    private static func errorText() -> String { String(cString: strerror(errno)) }

    private static func peerPidfd(_ fd: Int32) -> ProcessFD? {
        let pidfd = aa_socket_peer_pidfd(fd)
        return pidfd >= 0 ? ProcessFD(fd: pidfd) : nil
    }
}
