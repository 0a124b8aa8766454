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

/// The socket server's front door: a thread with an epoll set of its own (one per core, sharing the
/// ``ListeningSocket``) that accepts connections, checks
/// the peer (`SO_PEERCRED`, the caller's identity through ``CallerCache``), and answers cached tokens itself, the
/// way the C floor of the benchmark serves its lines: no channel, pipeline, task or future per connection. A
/// connection stays here for as long as every line it sends is a fast-path hit (``CachedTokenHandler/answer``);
/// its first other request (a miss, any other operation, a bad line, a reply the socket cannot take at once, or a
/// partial line over ``maxPartialLine``) hands it to NIO by descriptor, together with the bytes read and not yet
/// answered (``ConnectionAcceptor/adopt(_:)``), where the slow path serves it for the rest of its life.
///
/// Shared state lives elsewhere, as for NIO's connections: the ``ConnectionRegistry`` (cap and eviction; its
/// ``ConnectionRegistry/Holder/loop(_:fd:)`` closes through ``close(_:registration:)``), the ``AcceptGate`` (open
/// descriptors), and the ``ConnectionAcceptor`` (activity, the idle hook, shutdown's drain). Other threads reach the
/// loop only through ``close(_:registration:)``, ``stopAccepting()``, ``resumeAccepting()`` and a parked request's
/// wake-up, which queue a command and wake it.
final class AcceptLoop: @unchecked Sendable {
    /// A partial request line longer than this is not buffered here: NIO's line decoder takes the connection (and
    /// enforces the 64 KiB cap).
    static let maxPartialLine = 4096
    /// The longest line ``decode(_:)`` remembers (a plain `token` request is ~50 bytes).
    static let rememberedLine = 256
    /// Accepts per wake-up before the loop serves its connections again (fairness under a connection flood).
    static let acceptBatch = 64

    private enum Command {
        case close(fd: Int32, registration: Int)
        case stopAccepting
        case resumeAccepting
        case retryParked(String)
    }

    /// A class, so the loop reads and updates its connections in place (the caller's identity is not copied out
    /// and back for every line).
    private final class Connection {
        let registration: Int
        let caller: Caller
        /// The start of a request line whose newline has not arrived yet (while parked: all that arrived since).
        var partial: [UInt8] = []
        /// A plain `token` request (without its newline) waiting for its account's refresh (``TokenSnapshot/park``).
        var parked: [UInt8]?

        init(registration: Int, caller: Caller) {
            self.registration = registration
            self.caller = caller
        }

        /// What was read and not answered: the parked request's line, if any, then the partial input.
        var unanswered: [UInt8] { parked.map { $0 + [0x0A] + partial } ?? partial }
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
    /// Connections with a parked request, by account.
    private var parked: [String: [Int32]] = [:]
    private var accepting = true
    private var stopped = false
    /// When the last accept failed for lack of descriptors (EMFILE), accepting waits this long before it tries again.
    private var acceptRetry: ContinuousClock.Instant?
    private let scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: 16384, alignment: 16)
    private var reply = ByteBufferAllocator().buffer(capacity: 512)
    /// The last line this loop decoded as a request, and that request (``decode(_:)``).
    private var lastLine: [UInt8] = []
    private var lastRequest: WireRequest?
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

    /// Closes the loop's connection `registration` on `fd` (eviction, shutdown); ignored once it is closed or handed
    /// off (the descriptor's number may belong to another connection by then).
    func close(_ fd: Int32, registration: Int) { post(.close(fd: fd, registration: registration)) }

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
        while !(stopped && connections.isEmpty) {
            let timeout = acceptRetry.map { max(0, Int32(($0 - .now) / .milliseconds(1))) } ?? -1
            let count = aa_socket_epoll_wait(epollFD, &fds, 64, timeout)
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
                // Decided by what the descriptor reads, not by the event's flags: a closed descriptor's number may
                // already belong to a connection accepted in this same batch.
                case let fd: if connections[fd] != nil { serve(fd) }
                }
            }
        }
        for fd in connections.keys { closeConnection(fd) }
        if !stopped { stop() }
    }

    private func runCommands() {
        aa_socket_wakeup_drain(wakeFD)
        let pending = commands.withLock { commands -> [Command] in
            defer { commands.removeAll(keepingCapacity: true) }
            return commands
        }
        for command in pending {
            switch command {
            case .close(let fd, let registration):
                guard let connection = connections[fd], connection.registration == registration else { continue }
                // A parked request still gets its answer (shutdown closes input only): NIO takes it.
                if connection.parked != nil { handOff(fd) } else { closeConnection(fd) }
            case .stopAccepting: if !stopped { stop() }
            case .resumeAccepting: resume()
            case .retryParked(let account): retryParked(account)
            }
        }
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
            var line = acceptor.dispatcher.encodeError(nil, WireError(.permissionDenied, "this agent serves uid \(myUID) only"))
            line.append(0x0A)
            _ = line.withUnsafeBytes { aa_socket_send(fd, $0.baseAddress, UInt($0.count)) }
            release(fd)
            return
        }
        guard let registration = acceptor.connections.add(.loop(self, fd: fd)) else {
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
        connections[fd] = Connection(registration: registration, caller: caller)
        if aa_socket_epoll_add(epollFD, fd, 0) != 0 {
            logger.error("cannot watch a new connection; closing it", metadata: ["error": "\(AcceptLoop.errorText())"])
            closeConnection(fd)
            return
        }
        // A client writes its request right after connecting, so by now (the identification took a few system
        // calls) it is usually there: read it at once instead of on epoll's next report (docs/BENCHMARKS.md).
        serve(fd)
    }

    /// Reads what the client sent and answers each complete line from the snapshot, or hands the connection to NIO.
    private func serve(_ fd: Int32) {
        guard let connection = connections[fd] else { return }
        // One read never joins two writers' bytes (SO_PASSCRED, set on the listening socket): `sender` wrote all.
        // 0: the bytes carry no sender. They were queued before the agent set SO_PASSCRED (a socket-activated agent
        // starting), so they were written before the agent could look at the connection at all: taken as the
        // connecting process's, which gives a writer nothing it could not get by writing before its own exec
        // (docs/SECURITY.md). (A writer in a pid namespace the agent cannot see also reads as 0.)
        var sender: Int32 = 0
        let count = aa_socket_receive_from(fd, scratch.baseAddress, UInt(scratch.count), &sender)
        if count > 0, sender != 0, sender != connection.caller.pid {
            refuseOtherSender(fd, connection, sender: sender, UnsafeRawBufferPointer(rebasing: scratch[..<Int(count)]))
            return
        }
        if count < 0 {
            if errno != EAGAIN, errno != EWOULDBLOCK { closeConnection(fd) }
            return
        }
        if count == 0 {
            // End of input. A last line without a newline is a request (`printf '{...}' | socat`), and a parked
            // request still wants its reply after a half-close: NIO serves them, and reads the end of input again.
            if connection.parked == nil, connection.partial.isEmpty { closeConnection(fd) } else { handOff(fd) }
            return
        }
        let received = UnsafeRawBufferPointer(rebasing: scratch[..<Int(count)])
        if connection.parked != nil {
            // Kept, unread, until the refresh the parked request waits for has ended.
            connection.partial.append(contentsOf: received)
            if connection.partial.count > AcceptLoop.maxPartialLine { handOff(fd) }
            return
        }
        if connection.partial.isEmpty {
            consume(fd, connection, received)
        } else {
            let joined = connection.partial + received
            joined.withUnsafeBytes { consume(fd, connection, $0) }
        }
    }

    /// Bytes on this connection were written by another process than the one that connected (which passed the
    /// socket on, or forked a helper that kept it and then ran an allowed program): the connecting process's
    /// identity says nothing about the writer, so nothing it asks is served, whatever the account's policy. The
    /// client gets `permission_denied`, the refusal is logged and audited (for the account its line names, if
    /// any), and the connection is closed.
    private func refuseOtherSender(_ fd: Int32, _ connection: Connection, sender: Int32, _ bytes: UnsafeRawBufferPointer) {
        var request: WireRequest?
        if let end = AcceptLoop.newline(in: bytes, from: 0),
           case .request(let decoded) = WireRequest.decode(bytes: UnsafeRawBufferPointer(rebasing: bytes[..<end])) {
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
        var line = acceptor.dispatcher.encodeError(request?.id, WireError(.permissionDenied,
            "this connection was opened by pid \(connection.caller.pid), but pid \(sender) wrote to it: requests are taken only from the process that connected"))
        line.append(0x0A)
        _ = line.withUnsafeBytes { aa_socket_send(fd, $0.baseAddress, UInt($0.count)) }
        closeConnection(fd)
    }

    /// Answers the complete lines in `bytes` and keeps the rest as the connection's partial line, unless a line
    /// parks the connection or hands it to NIO (or it was closed). `retried`: the first line is a parked request asked
    /// again, already logged, and not parked a second time.
    private func consume(_ fd: Int32, _ connection: Connection, _ bytes: UnsafeRawBufferPointer, retried: Bool = false) {
        var retried = retried
        var start = 0
        while let newline = AcceptLoop.newline(in: bytes, from: start) {
            var end = newline
            if end > start, bytes[end - 1] == 0x0D { end -= 1 }
            reply.clear()
            guard let request = decode(UnsafeRawBufferPointer(rebasing: bytes[start..<end])) else {
                handOff(fd, input: Array(bytes[start...]))
                return
            }
            guard CachedTokenHandler.answer(request, caller: connection.caller, operations: operations,
                                            snapshot: snapshot, log: !retried, into: &reply) else {
                // Only requests without `min_valid`: the broker judges a joined refresh's token against the caller's
                // `min_valid` (min_valid_unsatisfiable), where asking again after it would start another refresh.
                if request.minValid == nil, !retried, let account = CachedTokenHandler.plainTokenAccount(request),
                   snapshot.park(account: account, minValid: .zero, reader: ObjectIdentifier(self),
                                 wake: { [self] in post(.retryParked(account)) }) {
                    // The account is being refreshed and has no token to serve meanwhile: wait here for it, like the
                    // slow path's single flight, but without a channel and a task per waiting request. Logged now,
                    // when it arrived (the slow path logs at arrival too), not again when it is answered.
                    operations.logRequest(.token, account: account, caller: connection.caller)
                    connection.parked = Array(bytes[start..<newline])
                    connection.partial = Array(bytes[(newline + 1)...])
                    parked[account, default: []].append(fd)
                    acceptor.connections.begin(connection.registration)
                    return
                }
                handOff(fd, input: Array(bytes[start...]))
                return
            }
            retried = false
            // Before the reply leaves: a client that reads it and connects again must find this connection already
            // more recently used than the new one's neighbours (the eviction order).
            acceptor.connections.touch(connection.registration)
            let sent = reply.withUnsafeReadableBytes { aa_socket_send(fd, $0.baseAddress, UInt($0.count)) }
            if sent < 0, errno != EAGAIN, errno != EWOULDBLOCK {
                closeConnection(fd)
                return
            }
            if sent < reply.readableBytes {
                // The client is not reading: NIO writes the rest and has the backpressure for what follows.
                reply.moveReaderIndex(forwardBy: max(0, sent))
                handOff(fd, input: Array(bytes[(newline + 1)...]), output: reply)
                return
            }
            start = newline + 1
        }
        if start == bytes.count {
            if !connection.partial.isEmpty { connection.partial = [] }
        } else {
            connection.partial = Array(bytes[start...])
        }
        if connection.partial.count > AcceptLoop.maxPartialLine { handOff(fd) }
    }

    /// The request on `line`, or nil when it is not one (the slow path then answers it). Clients send the same
    /// bytes again and again (`authctl token work`, a mail client's token command, a script in a loop): a line equal
    /// to the last one decoded here gives that request again without decoding (the decoder is a pure function of
    /// the bytes).
    private func decode(_ line: UnsafeRawBufferPointer) -> WireRequest? {
        if let last = lastRequest, line.count == lastLine.count, line.count > 0,
           lastLine.withUnsafeBytes({ memcmp($0.baseAddress!, line.baseAddress!, line.count) == 0 }) {
            return last
        }
        guard case .request(let request) = WireRequest.decode(bytes: line) else { return nil }
        if line.count <= AcceptLoop.rememberedLine {
            lastLine = Array(line)
            lastRequest = request
        }
        return request
    }

    /// The refresh `account`'s parked requests waited for has ended: each is decoded and answered again (from the
    /// new token, or by NIO's slow path, which reports a failed refresh), followed by what its client sent meanwhile.
    private func retryParked(_ account: String) {
        for fd in parked.removeValue(forKey: account) ?? [] {
            guard let connection = connections[fd], connection.parked != nil else { continue }
            let input = connection.unanswered
            connection.parked = nil
            connection.partial = []
            acceptor.connections.end(connection.registration)
            input.withUnsafeBytes { consume(fd, connection, $0, retried: true) }
        }
    }

    /// Hands the connection to NIO with its parked request and partial line (or `input`, when given).
    private func handOff(_ fd: Int32, input: [UInt8]? = nil, output: ByteBuffer? = nil) {
        guard let connection = connections.removeValue(forKey: fd) else { return }
        _ = aa_socket_epoll_remove(epollFD, fd)
        // No longer parked: busy again from the hand-off instead. (`input` is given only for unparked connections.)
        if connection.parked != nil { acceptor.connections.end(connection.registration) }
        let bytes = input ?? connection.unanswered
        acceptor.connections.handOff(connection.registration)
        acceptor.adopt(.init(fd: fd, registration: connection.registration, caller: connection.caller,
                             input: bytes, output: output) { [self] in released() })
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

    /// An accepted descriptor was closed, here or by NIO (any thread).
    private func released() {
        if gate.closed() { listener.resumeAccepting() }
    }

    private static func errorText() -> String { String(cString: strerror(errno)) }

    /// The index of the first newline in `bytes` at or after `start` (memchr).
    private static func newline(in bytes: UnsafeRawBufferPointer, from start: Int) -> Int? {
        guard start < bytes.count, let base = bytes.baseAddress,
              let found = memchr(base + start, 0x0A, bytes.count - start) else { return nil }
        return base.distance(to: UnsafeRawPointer(found))
    }

    private static func peerPidfd(_ fd: Int32) -> ProcessFD? {
        let pidfd = aa_socket_peer_pidfd(fd)
        return pidfd >= 0 ? ProcessFD(fd: pidfd) : nil
    }
}

/// The listening socket the ``AcceptLoop``s share. Each loop watches it with `EPOLLEXCLUSIVE` (a new connection wakes
/// one loop, not all); it is closed once the last loop has stopped watching it, and then the acceptor learns that
/// accepting has ended.
final class ListeningSocket: Sendable {
    let fd: Int32
    private let watching: Atomic<Int>
    /// The number of the last accepted connection (``accept()``).
    private let acceptOrder = Mutex<UInt64>(0)
    /// Until every loop has stopped (then dropped, which ends the loops' references back to this).
    private let loops = Mutex<[AcceptLoop]>([])
    private let whenClosed: @Sendable () -> Void

    /// Takes ownership of `fd` (bound and listening; made non-blocking here), for `loops` accept loops.
    init(fd: Int32, loops: Int, whenClosed: @escaping @Sendable () -> Void) throws(ServerError) {
        let flags = fcntl(fd, F_GETFL)
        guard flags >= 0, fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0 else {
            throw ServerError(.socket, "cannot make the listening socket non-blocking: \(String(cString: strerror(errno)))")
        }
        // Every message then carries its sender's pid, checked against the connecting process (AcceptLoop.serve).
        guard aa_socket_pass_credentials(fd) == 0 else {
            throw ServerError(.socket, "cannot ask for the senders of messages (SO_PASSCRED): \(String(cString: strerror(errno)))")
        }
        self.fd = fd
        self.watching = Atomic(loops)
        self.whenClosed = whenClosed
    }

    func add(_ loop: AcceptLoop) { loops.withLock { $0.append(loop) } }

    /// Accepts one connection and numbers it in the order the kernel's queue gave it out, across all loops (the
    /// number is taken under the same lock as the `accept4`). The queue is first in, first out, so a connection
    /// with a lower number was made no later than one with a higher number: ``CallerCache`` relies on it.
    /// Returns the descriptor (or -1), the number, and `errno` of a failed accept.
    func accept() -> (fd: Int32, accepted: UInt64, error: Int32) {
        acceptOrder.withLock { last in
            let accepted = aa_socket_accept(fd)
            guard accepted >= 0 else { return (accepted, 0, errno) }
            last += 1
            return (accepted, last, 0)
        }
    }

    private var all: [AcceptLoop] { loops.withLock { $0 } }

    /// Every loop stops accepting; the socket closes once all have.
    func stopAccepting() { for loop in all { loop.stopAccepting() } }

    /// The gate's count fell under its ceiling: every paused loop may accept again.
    func resumeAccepting() { for loop in all { loop.resumeAccepting() } }

    /// Called by each loop, on its thread, once it no longer watches the socket.
    func loopStopped() {
        guard watching.subtract(1, ordering: .acquiringAndReleasing).newValue == 0 else { return }
        close(fd)
        loops.withLock { $0.removeAll() }
        whenClosed()
    }
}
