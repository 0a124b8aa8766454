#if canImport(Glibc)
import Glibc
#endif
import AgentIPC
@testable import AgentServer
@testable import AuthCore
import Foundation
import XCTest

/// The connection cap (SECURITY.md 22) on the real socket: at the limit the connection idle longest makes room,
/// busy ones never do, and shutdown ends every connection.
extension SocketServerTests {
    /// There is no idle timer per connection: idle connections are closed when the cap needs room, longest idle
    /// first, whether or not they ever left the event loop.
    func testAtTheCapTheLongestIdleFastOnlyConnectionMakesRoom() async throws {
        let server = try await start(connectionLimit: 2)
        let first = try await TestClient.connect(path)
        try await first.send(SocketServerTests.fast(1) + "\n")
        let id1 = try await first.readReply().id
        XCTAssertEqual(id1, 1)
        let second = try await TestClient.connect(path)
        try await second.send(SocketServerTests.fast(2) + "\n")
        let id2 = try await second.readReply().id
        XCTAssertEqual(id2, 2)
        let third = try await TestClient.connect(path)
        try await third.send(SocketServerTests.fast(3) + "\n")
        let id3 = try await third.readReply().id
        XCTAssertEqual(id3, 3)
        let evicted = try await first.readLine()
        XCTAssertNil(evicted, "the longest idle connection was closed")
        try await second.send(SocketServerTests.fast(4) + "\n")
        let id4 = try await second.readReply().id
        XCTAssertEqual(id4, 4)
        XCTAssertEqual(server.loop.openConnections.load(ordering: .relaxed), 2)
    }

    /// Hundreds of connections against a cap of 2: the agent never holds more than the cap (each new one closes the
    /// one idle longest), and the last client is still served.
    func testHundredsOfConnectionsStayUnderTheCapAndTheLastIsServed() async throws {
        let server = try await start(connectionLimit: 2)
        var clients: [TestClient] = []
        for _ in 0..<200 { clients.append(try await TestClient.connect(path)) }
        let last = try await TestClient.connect(path)
        try await last.send(SocketServerTests.fast(7) + "\n")
        let id = try await last.readReply().id
        XCTAssertEqual(id, 7)
        XCTAssertEqual(server.loop.peakConnections.load(ordering: .relaxed), 2)
        XCTAssertEqual(server.loop.openConnections.load(ordering: .relaxed), 2)
        clients.removeAll()
    }

    /// At the cap, a connection with a request in flight is never closed to make room: while every one is busy a
    /// new connection is told `agent_busy` (with when to retry) and closed, and once one has gone the next is served.
    func testBusyConnectionsAreNeverEvictedAndANewOneWaitsForRoom() async throws {
        let server = try await start(policy: AccessPolicy(confirm: .firstUse), connectionLimit: 2)
        var busy: [TestClient] = []
        for id in 1...2 {
            let client = try await TestClient.connect(path)
            try await client.send(SocketServerTests.fast(id) + "\n")
            // The request waits for a person's answer: the connection is busy.
            let event = try await client.readLine()
            XCTAssertTrue(event?.contains("consent_required") == true, event ?? "nothing")
            busy.append(client)
        }
        let third = try await TestClient.connect(path)
        try? await third.send(#"{"v":1,"id":3,"op":"ping"}"# + "\n")
        let line = try await third.readLine()
        let refused = try XCTUnwrap(line, "a busy connection was closed to make room, or the cap was passed")
        let error = try XCTUnwrap(try JSONDecoder().decode(WireResponse<PingResult>.self, from: Data(refused.utf8)).error)
        XCTAssertEqual(error.knownCode, .agentBusy)
        XCTAssertEqual(error.retryAfter, 1)
        let end = try await third.readLine()
        XCTAssertNil(end, "the refused connection stayed open")
        XCTAssertEqual(server.loop.openConnections.load(ordering: .relaxed), 2)
        busy.removeFirst()
        for _ in 0..<500 where server.loop.openConnections.load(ordering: .relaxed) > 1 {
            try await Task.sleep(for: .milliseconds(10))
        }
        let fourth = try await TestClient.connect(path)
        try await fourth.send(#"{"v":1,"id":4,"op":"ping"}"# + "\n")
        let id = try await fourth.readID()
        XCTAssertEqual(id, 4)
    }

    /// Shutdown: the listening socket closes at once, an idle connection ends, a request waiting for a person is
    /// withdrawn with a reply, and the server's run ends once the last connection is gone.
    func testShutdownStopsAcceptingAndEndsEveryConnection() async throws {
        let server = try await start(policy: AccessPolicy(confirm: .firstUse))
        let idle = try await TestClient.connect(path)
        let waiting = try await TestClient.connect(path)
        try await waiting.send(SocketServerTests.fast(1) + "\n")
        let event = try await waiting.readLine()
        XCTAssertTrue(event?.contains("consent_required") == true, event ?? "nothing")
        server.loop.post(.shutdown)
        let idleEnd = try await idle.readLine()
        XCTAssertNil(idleEnd)
        let withdrawn = try await waiting.readLine()
        XCTAssertTrue(withdrawn?.contains("withdrawn") == true, "the waiting request answered: \(withdrawn ?? "nothing")")
        let waitingEnd = try await waiting.readLine()
        XCTAssertNil(waitingEnd)
        await running?.value
        running = nil
        do {
            _ = try await TestClient.connect(path)
            XCTFail("connected after shutdown")
        } catch {}
    }

    /// A client that asked for replies and never reads them (a stopped process, say) does not hold shutdown up
    /// beyond ``AcceptLoop/drainLimit``: its connection is closed then, and `serve()` returns.
    func testShutdownDoesNotWaitForeverForAClientThatNeverReads() async throws {
        let server = try await start()
        let stuck = try await TestClient.connect(path)
        // 4,000 replies of ~200 bytes: far more than the kernel holds for a client that does not read.
        let requests = String(repeating: SocketServerTests.fast(1) + "\n", count: 4000)
        let sending = Task { try? await stuck.send(requests) }
        try await stuck.waitUntilTheAgentCannotWriteMore()
        server.loop.post(.shutdown)
        let (ended, end) = AsyncStream.makeStream(of: Void.self)
        let serving = running
        Task { await serving?.value; end.yield() }
        // A guard against hanging the suite, not a measurement: the limit is a few seconds.
        Task { try? await Task.sleep(for: .seconds(60)); end.finish() }
        var events = ended.makeAsyncIterator()
        let returned = await events.next() != nil
        XCTAssertTrue(returned, "serve() still waits for a client that never reads")
        running = nil
        stuck.shutdownWrite()
        _ = await sending.value
    }

    func testConnectionLimitStaysBelowTheOpenFileLimit() {
        XCTAssertLessThanOrEqual(SocketServer.connectionLimit(), SocketServer.maxConnections)
        XCTAssertGreaterThanOrEqual(SocketServer.connectionLimit(), 16)
    }
}
