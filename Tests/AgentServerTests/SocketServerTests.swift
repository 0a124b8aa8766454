#if canImport(Glibc)
@testable import AgentService
import AuthTestSupport
import Glibc
#endif
@testable import AgentIPC
@testable import AgentServer
@testable import AgentAccess
@testable import AuthCore
import Foundation
import Logging
import ProcessTree
import Synchronization
import XCTest

/// The real socket server on a Unix socket in a temporary directory, with a real ``TokenBroker`` (in-memory ports)
/// and this test process as the client: requests on one connection, the limits, the idle hook and the access policy.
final class SocketServerTests: XCTestCase {
    var directory: String!
    var server: SocketServer?
    var running: Task<Void, Never>?

    override func setUpWithError() throws {
        var template = Array("/tmp/aa-sock-XXXXXX".utf8CString)
        directory = try XCTUnwrap(mkdtemp(&template).flatMap { String(validatingCString: $0) })
    }

    override func tearDown() async throws {
        running?.cancel()
        await running?.value
        try? FileManager.default.removeItem(atPath: directory)
    }

    var path: String { directory + "/agent.sock" }

    /// A server for account `work` (a token cached for an hour unless `cached` is false), under `policy`.
    func start(policy: AccessPolicy? = nil, cached: Bool = true, connectionLimit: Int = 64,
               whenIdle: IdleHook? = nil, http: any HTTPTransport = NoHTTP()) async throws -> SocketServer {
        let broker = TokenBroker(accounts: [SocketServerTests.account()], store: MemorySecretStore(),
                                 http: http, redirects: NoRedirects(),
                                 browser: NoBrowser(), time: ManualClock(),
                                 random: { 0 }, logger: Logger(label: "test"))
        if cached { await broker.install("work", access: "at-1", lifetime: .seconds(3600)) }
        let gate = policy.map { AccessGate(policies: ["work": $0], logger: Logger(label: "test")) }
        let dispatcher = RequestDispatcher(operations: AgentOperations(broker: broker, info: AgentInfo(version: "9.9.9", pid: 1, startedAt: .now, socketPath: path),
                                           access: gate, logger: Logger(label: "test")))
        let server = try await SocketServer.listen(.path(path), dispatcher: dispatcher, logger: Logger(label: "test"),
                                                   activity: nil, whenIdle: whenIdle, connectionLimit: connectionLimit)
        self.server = server
        running = Task { await server.serve() }
        return server
    }

    static func account(_ name: String = "work", scopes: [String] = ["openid", "email"]) -> AccountConfig {
        AccountConfig(name: name, issuer: URL(string: "https://login.example.com")!, clientID: "client", scopes: scopes)
    }

    static let fast = #"{"v":1,"id":ID,"op":"token","account":"work"}"#
    static func fast(_ id: Int) -> String { fast.replacingOccurrences(of: "ID", with: "\(id)") }

    func testCachedTokensOnOneConnectionThenAHalfClose() async throws {
        let server = try await start()
        let client = try await TestClient.connect(path)
        for id in 1...3 {
            try await client.send(SocketServerTests.fast(id) + "\n")
            let reply = try await client.readReply()
            XCTAssertEqual(reply.id, id)
            XCTAssertEqual(reply.result?.accessToken, "at-1")
        }
        // Half-close: the agent answers what was sent, then closes its side.
        try await client.send(SocketServerTests.fast(4) + "\n")
        client.shutdownWrite()
        let lastID = try await client.readReply().id
        XCTAssertEqual(lastID, 4)
        let end = try await client.readLine()
        XCTAssertNil(end, "closed after the last reply")
    }

    func testSeveralRequestsInOneWriteAreEachAnsweredByID() async throws {
        _ = try await start()
        let client = try await TestClient.connect(path)
        // One write, three requests, each run as its own task: replies are matched by id (docs/PROTOCOL.md).
        try await client.send([SocketServerTests.fast(1), #"{"v":1,"id":2,"op":"status"}"#, SocketServerTests.fast(3)]
            .joined(separator: "\n") + "\n")
        var order: [Int] = []
        for _ in 0..<3 {
            let id = try await client.readID()
            order.append(try XCTUnwrap(id))
        }
        XCTAssertEqual(Set(order), [1, 2, 3])
        // Afterwards the same connection still serves.
        try await client.send(#"{"v":1,"id":4,"op":"ping"}"# + "\n")
        let pingID = try await client.readID()
        XCTAssertEqual(pingID, 4)
        try await client.send(SocketServerTests.fast(5) + "\n")
        let five = try await client.readReply()
        XCTAssertEqual(five.id, 5)
        XCTAssertEqual(five.result?.accessToken, "at-1")
    }

    /// The idle hook runs a second after the last client left, and not while a client stays connected past that
    /// moment.
    func testTheIdleHookRunsOnlyWhenNoClientIsConnected() async throws {
        let calls = Atomic<Int>(0)
        _ = try await start(whenIdle: { calls.add(1, ordering: .relaxed) })
        func waitForCalls(_ count: Int) async throws {
            for _ in 0..<300 where calls.load(ordering: .relaxed) < count { try await Task.sleep(for: .milliseconds(20)) }
        }
        // The hook's first run, a second after start-up.
        try await waitForCalls(1)
        var client: TestClient? = try await TestClient.connect(path)
        try await client?.send(#"{"v":1,"id":1,"op":"ping"}"# + "\n")
        _ = try await client?.readID()
        client = nil
        try await waitForCalls(2)
        XCTAssertEqual(calls.load(ordering: .relaxed), 2, "once after the client left")

        // A client gone (the hook is scheduled), then another connects at once and stays past the hook's moment: no
        // idle then; the hook runs once the agent is idle at last.
        client = try await TestClient.connect(path)
        try await client?.send(#"{"v":1,"id":3,"op":"ping"}"# + "\n")
        _ = try await client?.readID()
        client?.shutdownWrite()
        _ = try await client?.readLine()
        let closedAt = ContinuousClock.now
        client = nil
        let other = try await TestClient.connect(path)
        // The scenario needs `other` connected well inside the hook's delay after the close; a machine that stalled
        // this thread for most of it did not set the scenario up, which is not a failure of the agent.
        let late = ContinuousClock.now - closedAt
        guard late < .milliseconds(600) else {
            throw XCTSkip("the test thread stalled \(late) between the close and the next connect (delay 1 s)")
        }
        try await Task.sleep(for: .milliseconds(1500))
        XCTAssertEqual(calls.load(ordering: .relaxed), 2, "not idle while a client is connected")
        try await other.send(SocketServerTests.fast(4) + "\n")
        _ = try await other.readReply()
        other.shutdownWrite()
        _ = try await other.readLine()
        try await waitForCalls(3)
        XCTAssertEqual(calls.load(ordering: .relaxed), 3)
    }

    /// Work without a client (a proactive refresh) runs the hook again, a second after it finished; with a client
    /// connected it waits for that client to leave.
    func testWorkWithoutAClientRunsTheIdleHookAgain() async throws {
        let calls = Atomic<Int>(0)
        let server = try await start(whenIdle: { calls.add(1, ordering: .relaxed) })
        func waitForCalls(_ count: Int) async throws {
            for _ in 0..<300 where calls.load(ordering: .relaxed) < count { try await Task.sleep(for: .milliseconds(20)) }
        }
        try await waitForCalls(1)
        server.workFinished()
        try await waitForCalls(2)
        XCTAssertEqual(calls.load(ordering: .relaxed), 2, "once after the work")

        let client = try await TestClient.connect(path)
        try await client.send(#"{"v":1,"id":1,"op":"ping"}"# + "\n")
        _ = try await client.readID()
        server.workFinished()
        try await Task.sleep(for: .milliseconds(1500))
        XCTAssertEqual(calls.load(ordering: .relaxed), 2, "not while a client is connected")
        client.shutdownWrite()
        _ = try await client.readLine()
        try await waitForCalls(3)
        XCTAssertEqual(calls.load(ordering: .relaxed), 3)
    }

    /// More requests in one write than may be in flight: reading pauses at the cap and resumes as they end, and
    /// every one is answered.
    func testMoreRequestsThanTheInFlightCapAreAllAnswered() async throws {
        let server = try await start()
        let client = try await TestClient.connect(path)
        let count = SocketServer.maxInFlightPerConnection * 3
        try await client.send((1...count).map { #"{"v":1,"id":\#($0),"op":"ping"}"# }.joined(separator: "\n") + "\n")
        var ids = Set<Int>()
        for _ in 0..<count {
            let id = try await client.readID()
            ids.insert(try XCTUnwrap(id))
        }
        XCTAssertEqual(ids, Set(1...count))
        let registered = server.loop.openConnections.load(ordering: .relaxed)
        XCTAssertEqual(registered, 1)
    }

    /// A client that half-closes after its requests gets every reply, then the agent closes the connection.
    /// `diagnose` asks every authorization server; a client that asks and hangs up takes that work with it, so
    /// connecting, asking and hanging up again and again cannot pile up requests to the servers.
    func testADiagnoseWhoseClientHangsUpIsCancelled() async throws {
        let http = HeldHTTP()
        _ = try await start(http: http)
        let client = try await TestClient.connect(path)
        try await client.send(#"{"v":1,"id":1,"op":"diagnose"}"# + "\n")
        try await eventually("the diagnosis asks the server") { http.outstanding == 1 }
        client.hangUp()
        try await eventually("the diagnosis is cancelled with its client gone") { http.outstanding == 0 }
        XCTAssertGreaterThan(http.cancelled, 0, "ended by the cancellation, not by an answer")
    }

    /// Polls `condition` every 10 ms for up to 20 s (the work it waits for runs on other threads).
    func eventually(_ what: String, _ condition: () -> Bool) async throws {
        for _ in 0..<2000 {
            if condition() { return }
            try await Task.sleep(for: .milliseconds(10))
        }
        XCTFail("never happened: \(what)")
    }

    func testHalfCloseAfterRequestsAnswersThemThenCloses() async throws {
        _ = try await start()
        let client = try await TestClient.connect(path)
        try await client.send(#"{"v":1,"id":1,"op":"status"}"# + "\n" + #"{"v":1,"id":2,"op":"ping"}"#)
        client.shutdownWrite()
        var ids = Set<Int>()
        for _ in 0..<2 {
            let id = try await client.readID()
            ids.insert(try XCTUnwrap(id))
        }
        XCTAssertEqual(ids, [1, 2], "the last line, without a newline, is answered too")
        let end = try await client.readLine()
        XCTAssertNil(end, "closed after the last reply")
    }

    func testACallerTheAllowListDeniesGetsAccessDeniedAndIsAudited() async throws {
        _ = try await start(policy: AccessPolicy(allowedClients: [.path("/nonexistent/client")]))
        let client = try await TestClient.connect(path)
        try await client.send(SocketServerTests.fast(7) + "\n")
        let reply = try await client.readLine()
        // What the broker's path answers this same process for the same request.
        let me = Caller.identify(peer: PeerCredentials(pid: getpid(), uid: getuid(), gid: getgid()), via: "socket")
        let dispatcher = try XCTUnwrap(server).loop.dispatcher
        guard case .request(let request) = WireRequest.decode(line: Array(SocketServerTests.fast(7).utf8)) else {
            return XCTFail("not a request")
        }
        let expected = await dispatcher.execute(request, caller: me) { _ in }
        XCTAssertEqual(reply, String(decoding: expected, as: UTF8.self))
        XCTAssertTrue(reply?.contains(#""code":"access_denied""#) == true)
        let audit = dispatcher.operations.audit(WireRequest(op: .audit) { $0.account = "work" }).entries
        XCTAssertEqual(audit.map(\.outcome), [AuditEntry.denied, AuditEntry.denied], "the socket's refusal and ours")
        XCTAssertEqual(audit.first?.caller.exe, me.identity.exe)
    }

    func testAListedCallerIsServedAndTheGrantIsAuditedOnce() async throws {
        let me = try XCTUnwrap(ProcFile.executable(of: getpid()))
        let server = try await start(policy: AccessPolicy(allowedClients: [.path(me)]))
        let client = try await TestClient.connect(path)
        try await client.send(SocketServerTests.fast(8) + "\n")
        let token = try await client.readReply().result?.accessToken
        XCTAssertEqual(token, "at-1")
        let audit = server.loop.dispatcher.operations.audit(WireRequest(op: .audit) { $0.account = "work" }).entries
        XCTAssertEqual(audit.map(\.outcome), [AuditEntry.granted])
        XCTAssertEqual(audit.first?.caller.exe, me, "the grant names the kernel-read executable")
        XCTAssertEqual(audit.first?.caller.pid, getpid())
    }

    func testAnOversizeLineGetsMessageTooLargeAndTheConnectionCloses() async throws {
        _ = try await start()
        for servedFirst in [false, true] {
            let client = try await TestClient.connect(path)
            if servedFirst {
                try await client.send(SocketServerTests.fast(1) + "\n")
                let firstID = try await client.readReply().id
                XCTAssertEqual(firstID, 1)
            }
            try await client.send(String(repeating: "x", count: WireProtocol.maxMessageBytes + 1) + "\n")
            let reply = try await client.readLine()
            XCTAssertTrue(reply?.contains(#""code":"message_too_large""#) == true, reply ?? "no reply")
            let end = try await client.readLine()
            XCTAssertNil(end, "closed after the error")
        }
    }
}

/// A blocking Unix-socket client; its calls run on a thread of their own, not on the tasks the server needs.
final class TestClient: @unchecked Sendable {
    let fd: Int32
    private var buffered: [UInt8] = []

    private init(fd: Int32) { self.fd = fd }
    deinit { close(fd) }

    static func connect(_ path: String) async throws -> TestClient {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw POSIXError(.EIO) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            let bytes = Array(path.utf8.prefix(raw.count - 1))
            raw.copyBytes(from: bytes)
        }
        // A reply that never comes fails the test instead of hanging it.
        var timeout = timeval(tv_sec: 20, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard result == 0 else { close(fd); throw POSIXError(.ECONNREFUSED) }
        return TestClient(fd: fd)
    }

    func send(_ text: String) async throws {
        let bytes = Array(text.utf8)
        try await offThread {
            var sent = 0
            while sent < bytes.count {
                let n = bytes[sent...].withUnsafeBytes { Glibc.send(self.fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                guard n > 0 else { throw POSIXError(.EPIPE) }
                sent += n
            }
        }
    }

    func shutdownWrite() { shutdown(fd, Int32(SHUT_WR)) }

    /// Hangs up in both directions, as a client that closes its socket (the descriptor stays until deinit).
    func hangUp() { shutdown(fd, Int32(SHUT_RDWR)) }

    /// Returns once the bytes waiting unread on this socket stopped growing (checked every 50 ms): the kernel holds
    /// no more for this client, so whatever else the agent owes it stays with the agent.
    func waitUntilTheAgentCannotWriteMore() async throws {
        var last: Int32 = -1
        for _ in 0..<400 {
            var queued: Int32 = 0
            _ = ioctl(fd, UInt(FIONREAD), &queued)
            if queued > 0, queued == last { return }
            last = queued
            try await Task.sleep(for: .milliseconds(50))
        }
        throw POSIXError(.ETIMEDOUT)
    }

    /// The next line without its newline; nil at end of stream (or a reset).
    func readLine() async throws -> String? {
        try await offThread {
            while true {
                if let newline = self.buffered.firstIndex(of: 0x0A) {
                    let line = String(decoding: self.buffered[..<newline], as: UTF8.self)
                    self.buffered.removeSubrange(...newline)
                    return line
                }
                var chunk = [UInt8](repeating: 0, count: 65536)
                let n = chunk.withUnsafeMutableBytes { recv(self.fd, $0.baseAddress, $0.count, 0) }
                if n == 0 || (n < 0 && errno == ECONNRESET) { return nil }
                guard n > 0 else { throw POSIXError(.ETIMEDOUT) }
                self.buffered.append(contentsOf: chunk[..<n])
            }
        }
    }

    func readReply() async throws -> WireResponse<TokenResult> {
        let line = try await readLine()
        return try JSONDecoder().decode(WireResponse<TokenResult>.self, from: Data(XCTUnwrap(line).utf8))
    }

    /// The `id` of the next reply, whatever its result.
    func readID() async throws -> Int? {
        struct Reply: Decodable { var id: Int? }
        let line = try await readLine()
        return try JSONDecoder().decode(Reply.self, from: Data(XCTUnwrap(line).utf8)).id
    }

    private func offThread<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            Thread.detachNewThread { continuation.resume(with: Result { try body() }) }
        }
    }
}

extension TokenBroker {
    /// Caches a token for `name` as a sign-in or refresh would (tests only).
    func install(_ name: String, access: String, lifetime: Duration, scopes: [String]? = nil, tokenType: String = "Bearer") {
        accounts[name]?.cache = CachedToken(tokens: TokenSet(accessToken: Secret(access), tokenType: tokenType, scopes: scopes,
                                                             lifetime: lifetime, receivedAt: time.now()))
    }
}

/// An authorization server that takes every request and answers none: each call waits until its task is cancelled.
final class HeldHTTP: HTTPTransport, @unchecked Sendable {
    private let counts = Mutex((outstanding: 0, cancelled: 0))
    var outstanding: Int { counts.withLock { $0.outstanding } }
    var cancelled: Int { counts.withLock { $0.cancelled } }

    func get(_ url: URL) async throws(AuthError) -> HTTPReply { try await hold() }

    func postForm(_ url: URL, fields: [(String, String)], basicAuth: (user: String, password: Secret)?,
                  headers: [(String, String)]) async throws(AuthError) -> HTTPReply { try await hold() }

    private func hold() async throws(AuthError) -> HTTPReply {
        counts.withLock { $0.outstanding += 1 }
        defer { counts.withLock { $0.outstanding -= 1 } }
        do {
            try await Task.sleep(for: .seconds(3600))
        } catch {
            counts.withLock { $0.cancelled += 1 }
        }
        throw AuthError(.serverUnreachable, "held")
    }
}
