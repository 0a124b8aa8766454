import AgentService
import AgentRuntime
import Glibc
import AgentIPC
import AgentAccess
import AuthCore
import CAgentSocket
import FoundationEssentials
import Logging
import Synchronization

/// Serving a connection the loop owns: reading, lines, requests, writing and closing, driven
/// by its ``ConnectionStateMachine``. On the loop's thread only.
extension AcceptLoop {
    /// epoll reported the connection (or `admit` guesses it is readable): read, serve, write, watch or close.
    /// `events` may be stale (a descriptor closed and reused in the same batch), so each is checked by what the
    /// socket does, not trusted.
    func ready(_ fd: Int32, _ connection: Connection, _ events: UInt32) {
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
    func read(_ fd: Int32, _ connection: Connection) {
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
            cancelTasks(connection, personOnly: true)
        } else if errno != EAGAIN, errno != EWOULDBLOCK {
            gone(fd)
        }
    }

    /// Serves the complete lines the machine gives out, writes what is pending, then closes the connection if it is
    /// finished or sets what epoll watches it for.
    func drive(_ fd: Int32, _ connection: Connection) {
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

    func serveLines(_ fd: Int32, _ connection: Connection) {
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

    /// One request line: answered here as an error, or started as a task.
    func serve(_ fd: Int32, _ connection: Connection, _ line: ArraySlice<UInt8>) {
        switch line.withUnsafeBytes({ WireRequest.decode(bytes: $0) }) {
        case .request(let request): start(request, fd, connection)
        case .invalid(let id, let error): writeLine(fd, connection, dispatcher.encodeError(id, error))
        }
    }

    /// Runs `request` as a task of its own; its event lines and its reply come back as commands.
    func start(_ request: WireRequest, _ fd: Int32, _ connection: Connection) {
        connection.machine.started()
        touch(connection)
        connection.nextSerial += 1
        let (serial, registration, caller, dispatcher) = (connection.nextSerial, connection.registration,
                                                          connection.caller, self.dispatcher)
        let task = Task { [self] in
            let reply = await dispatcher.execute(request, caller: caller) { line in
                self.post(.reply(fd: fd, registration: registration, line: line, finished: nil))
            }
            post(.reply(fd: fd, registration: registration, line: reply, finished: serial))
        }
        if dispatcher.waitsForPerson(request, caller: caller) {
            connection.cancellable[serial] = (task, person: true)
        } else if dispatcher.onlyForItsReply(request) {
            connection.cancellable[serial] = (task, person: false)
        }
    }

    /// Bytes on this connection were written by another process than the one that connected (which passed the
    /// socket on, or forked a helper that kept it and then ran an allowed program): the connecting process's
    /// identity says nothing about the writer, so nothing it asks is served, whatever the account's policy. The
    /// client gets `permission_denied`, the refusal is logged and audited (for the account its line names, if
    /// any), and the connection is closed. The refusal is the connection's last output, after the replies already
    /// owed (``ConnectionStateMachine/refuse(_:)``: never inside one the socket took only part of); a client that
    /// does not take it is closed ``drainLimit`` later, as at shutdown.
    func refuseOtherSender(_ fd: Int32, _ connection: Connection, sender: Int32, _ bytes: UnsafeRawBufferPointer) {
        var request: WireRequest?
        if let newline = bytes.firstIndex(of: 0x0A),
           case .request(let decoded) = WireRequest.decode(bytes: UnsafeRawBufferPointer(rebasing: bytes[..<newline])) {
            request = decoded
        }
        let error = dispatcher.operations.refuseOtherSender(request, caller: connection.caller, sender: sender)
        var refusal = dispatcher.encodeError(request?.id, error)
        refusal.append(0x0A)
        refusal.withUnsafeBytes { connection.machine.refuse($0) }
        // Nothing more is served: the requests in flight whose reply is all they are for are cancelled, those
        // waiting for a person withdrawn (the others finish, and their replies are dropped).
        cancelTasks(connection, personOnly: false)
        refused.append((fd, connection.registration, closeBy: AcceptLoop.monotonicNow() + AcceptLoop.drainLimit))
    }

    // MARK: - Writing and closing

    func writeLine(_ fd: Int32, _ connection: Connection, _ line: [UInt8]) {
        var line = line
        line.append(0x0A)
        line.withUnsafeBytes { write(fd, connection, $0) }
    }

    /// Sends `bytes` now if nothing is waiting before them, and keeps what the socket does not take.
    func write(_ fd: Int32, _ connection: Connection, _ bytes: UnsafeRawBufferPointer) {
        guard connection.machine.isServing else { return }
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
    func flush(_ fd: Int32, _ connection: Connection) {
        guard connection.machine.pendingOutputCount > 0 else { return }
        let sent = connection.machine.withPendingOutput { aa_socket_send(fd, $0.baseAddress, UInt($0.count)) }
        if sent < 0 {
            if errno != EAGAIN, errno != EWOULDBLOCK { gone(fd) }
            return
        }
        connection.machine.wrote(sent)
    }

    /// A line to a descriptor that is not (or no longer) a served connection: best effort, never waits.
    func sendLine(_ fd: Int32, _ bytes: [UInt8]) {
        var line = bytes
        line.append(0x0A)
        _ = line.withUnsafeBytes { aa_socket_send(fd, $0.baseAddress, UInt($0.count)) }
    }

    /// Cancels the connection's cancellable requests; with `personOnly`, those that wait for a person alone.
    func cancelTasks(_ connection: Connection, personOnly: Bool) {
        for (serial, entry) in connection.cancellable where entry.person || !personOnly {
            entry.task.cancel()
            connection.cancellable[serial] = nil
        }
    }

    /// The client hung up, the socket failed, or the connection is evicted: closed now. Requests in flight finish
    /// (a refresh's result is cached) and their replies are dropped; those waiting for a person are withdrawn, and
    /// those whose work only their reply uses are cancelled.
    func gone(_ fd: Int32) {
        guard let connection = connections[fd] else { return }
        connection.machine.hungUp()
        cancelTasks(connection, personOnly: false)
        closeConnection(fd)
    }

    func closeConnection(_ fd: Int32) {
        guard let connection = connections.removeValue(forKey: fd) else { return }
        if connection.confined { confinedConnections -= 1 }
        Glibc.close(fd)
        openConnections.subtract(1, ordering: .relaxed)
        activity?.end()
        if connections.isEmpty { armIdleHook() }
    }

    /// Closes a descriptor that never became a connection (refused). What the client already sent is read first:
    /// closing a Unix socket with unread input resets it, and the client could lose the refusal line.
    func release(_ fd: Int32) {
        _ = aa_socket_receive(fd, scratch.baseAddress, UInt(scratch.count))
        Glibc.close(fd)
    }
}
