import FoundationEssentials
import Glibc

/// A small blocking client over the agent's Unix socket: no event loop, no threads, so `authctl` starts fast.
/// Every wait is bounded: the connection by `connectTimeout`, each call by ``replyTimeout`` unless it is nil.
public final class AgentClient {
    public let path: String
    /// How long one call may wait for its final reply line, counted from when it was sent; nil: no limit (a call
    /// that waits for a person, such as a sign-in). An event that says the agent now waits for a person for up to
    /// `timeout_s` (a consent question, a sign-in) moves the limit to that wait plus this much again, so a person's
    /// time allowed by the agent's configuration (`consent_timeout` up to 600 s) is never cut short here.
    public var replyTimeout: Duration?
    private let fd: Int32
    private var buffer: [UInt8] = []
    private var nextID = 1
    private var deadline: ContinuousClock.Instant?
    /// Sent with every request (``WireRequest/program``): on a host reached through `authctl forward`, the program
    /// that ran authctl there.
    public var program: String?
    /// The socket is a forward made by `authctl forward` on a host: sshd there accepts every connection itself, so a
    /// desktop end that is gone shows as a connection closed before any answer (``ClientError/forwardEnded(path:)``).
    public var throughForward = false
    /// Whether the agent has sent anything on this connection.
    private var heard = false

    /// The agent's listen queue is full, or systemd holds the socket and starts the agent: connect() waits.
    public static let defaultConnectTimeout: Duration = .seconds(5)

    public init(path: String, connectTimeout: Duration = AgentClient.defaultConnectTimeout,
                replyTimeout: Duration? = nil) throws(ClientError) {
        self.replyTimeout = replyTimeout
        self.path = path
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw .io("socket() failed: \(String(cString: strerror(errno)))") }
        guard var address = SocketPath.address(path) else {
            close(fd)
            throw .io("socket path is too long (\(path.utf8.count) bytes, at most \(SocketPath.maxAddressBytes)): \(path)")
        }
        // connect() on a Unix stream socket blocks while the listener's queue is full; SO_SNDTIMEO bounds it.
        var limit = AgentClient.socketTimeval(connectTimeout)
        _ = setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, socklen_t(MemoryLayout<timeval>.size))
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        if result != 0 {
            let code = errno
            close(fd)
            if code == ENOENT || code == ECONNREFUSED { throw .agentNotRunning(path: path, errno: code) }
            if code == EAGAIN || code == EINPROGRESS || code == ETIMEDOUT {
                throw .timeout("the agent did not accept the connection within \(connectTimeout.components.seconds) s (\(path))")
            }
            throw .io("cannot connect to \(path): \(String(cString: strerror(code)))")
        }
        var none = Glibc.timeval()
        _ = setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &none, socklen_t(MemoryLayout<timeval>.size))
        self.fd = fd
    }

    deinit { close(fd) }

    static func socketTimeval(_ duration: Duration) -> Glibc.timeval {
        let (seconds, attoseconds) = duration.components
        return Glibc.timeval(tv_sec: Int(seconds), tv_usec: Int(attoseconds / 1_000_000_000_000))
    }

    /// Starts the time limit of one call.
    private func startCall() {
        deadline = replyTimeout.map { ContinuousClock.now + $0 }
    }

    /// Sends one request and returns its result, passing any `event` lines to `onEvent` as they arrive.
    public func call<R: Decodable>(_ request: WireRequest, as: R.Type,
                                   onEvent: (WireEvent) -> Void = { _ in }) throws(ClientError) -> R {
        var request = request
        let id = nextID
        nextID += 1
        request.id = id
        request.program = request.program ?? program
        startCall()
        try writeAll(Array((request.line + "\n").utf8))
        let heard = { (event: WireEvent) in
            self.allowForPerson(event)
            onEvent(event)
        }
        while true {
            if let result = try ReplyReader.read(try readLine(), as: R.self, request: id, onEvent: heard) { return result }
        }
    }

    /// Sends `request`, which stays in flight, and reads its event lines until `until` takes one (a `forward`
    /// session's `forward_open`); its final reply is read later with ``reply(to:as:)``, once ``descriptor`` is
    /// readable. Returns the request's id.
    public func start(_ request: WireRequest, until: (WireEvent) -> Bool) throws(ClientError) -> Int {
        var request = request
        let id = nextID
        nextID += 1
        request.id = id
        startCall()
        try writeAll(Array((request.line + "\n").utf8))
        var taken = false
        while !taken {
            if try ReplyReader.read(try readLine(), as: NoResult.self, request: id, onEvent: { taken = until($0) }) != nil {
                throw .protocolViolation("the agent answered '\(request.op)' before it said it had started")
            }
        }
        return id
    }

    /// The final reply of request `id` sent with ``start(_:until:)`` (its later events are dropped).
    public func reply<R: Decodable>(to id: Int, as: R.Type) throws(ClientError) -> R {
        deadline = nil
        while true {
            if let result = try ReplyReader.read(try readLine(), as: R.self, request: id, onEvent: { _ in }) { return result }
        }
    }

    /// The connection's socket, to wait for with poll(2) beside other descriptors.
    public var descriptor: Int32 { fd }

    /// The agent waits for a person for up to `timeout_s`: the reply may come that much later, plus the call's own limit.
    private func allowForPerson(_ event: WireEvent) {
        guard let seconds = event.timeoutSeconds, seconds > 0, let limit = replyTimeout, let current = deadline else { return }
        deadline = max(current, ContinuousClock.now + .seconds(seconds) + limit)
    }

    private func writeAll(_ bytes: [UInt8]) throws(ClientError) {
        var offset = 0
        while offset < bytes.count {
            let n = bytes[offset...].withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if n < 0 {
                if errno == EINTR { continue }
                // The agent closed the connection without reading the request: it refused the connection itself
                // (`agent_busy`, another uid) and its one line saying so is what the caller reads next; without
                // one, reading reports the close.
                if errno == EPIPE || errno == ECONNRESET { return }
                throw .io("cannot write to the agent: \(String(cString: strerror(errno)))")
            }
            offset += n
        }
    }

    private func readLine() throws(ClientError) -> [UInt8] {
        while true {
            if let newline = buffer.firstIndex(of: 0x0A) {
                let line = Array(buffer[..<newline])
                buffer.removeSubrange(...newline)
                return line
            }
            guard buffer.count <= WireProtocol.maxMessageBytes else {
                throw .protocolViolation("the agent sent a line longer than \(WireProtocol.maxMessageBytes) bytes")
            }
            try waitReadable()
            var chunk = [UInt8](repeating: 0, count: 16 * 1024)
            let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n < 0 {
                if errno == EINTR { continue }
                if throughForward, !heard, errno == ECONNRESET { throw .forwardEnded(path: path) }
                throw .io("cannot read from the agent: \(String(cString: strerror(errno)))")
            }
            if n == 0 {
                if throughForward, !heard { throw .forwardEnded(path: path) }
                throw .protocolViolation("the agent closed the connection without answering")
            }
            heard = true
            buffer.append(contentsOf: chunk[..<n])
        }
    }

    /// Returns when the socket has something to read, or throws `timeout` at the call's deadline.
    private func waitReadable() throws(ClientError) {
        guard let deadline, let limit = replyTimeout else { return }
        while true {
            let left = deadline - ContinuousClock.now
            let milliseconds = left <= .zero ? 0 : Int32(clamping: left.components.seconds * 1000
                + left.components.attoseconds / 1_000_000_000_000_000 + 1)
            var entry = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let n = poll(&entry, 1, milliseconds)
            if n > 0 { return }
            if n < 0 && errno == EINTR { continue }
            if n < 0 { throw .io("cannot wait for the agent: \(String(cString: strerror(errno)))") }
            throw .timeout("the agent did not answer within \(limit.components.seconds) s")
        }
    }
}
