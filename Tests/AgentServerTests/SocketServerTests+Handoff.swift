#if canImport(Glibc)
import Glibc
#endif
@testable import AgentServer
@testable import AuthCore
import Foundation
import XCTest

/// The accept loop's edges: what it keeps (lines split across reads), and when it hands a connection to NIO with the
/// bytes it read and the reply it could not send, so that nothing the client sent or was sent is lost or repeated.
extension SocketServerTests {
    /// The loop remembers the last line it decoded: the same bytes again give the same request, and any other line
    /// (another id, another account) its own.
    func testRepeatedAndChangedLinesAreEachAnsweredForWhatTheySay() async throws {
        let server = try await start()
        let first = try await TestClient.connect(path)
        try await first.send(SocketServerTests.fast(5) + "\n" + SocketServerTests.fast(5) + "\n" + SocketServerTests.fast(6) + "\n")
        var ids: [Int?] = []
        for _ in 0..<3 {
            let reply = try await first.readReply()
            XCTAssertEqual(reply.result?.accessToken, "at-1")
            ids.append(reply.id)
        }
        XCTAssertEqual(ids, [5, 5, 6])
        let other = try await TestClient.connect(path)
        try await other.send(SocketServerTests.fast(5).replacingOccurrences(of: "\"work\"", with: "\"nope\"") + "\n")
        let refused = try await other.readLine()
        XCTAssertTrue(refused?.contains(#""error""#) == true, refused ?? "no reply")
        XCTAssertFalse(refused?.contains("at-1") == true)
        let again = try await TestClient.connect(path)
        try await again.send(SocketServerTests.fast(5) + "\n")
        let reply = try await again.readReply()
        XCTAssertEqual(reply.id, 5)
        XCTAssertEqual(reply.result?.accessToken, "at-1")
        XCTAssertEqual(server.acceptor.adopted.load(ordering: .relaxed), 1, "only the unknown account's connection")
    }

    func testALineSplitAcrossReadsIsAnsweredInTheAcceptLoop() async throws {
        let server = try await start()
        let client = try await TestClient.connect(path)
        let line = Array((SocketServerTests.fast(1) + "\n").utf8)
        try await client.send(String(decoding: line[..<20], as: UTF8.self))
        try await Task.sleep(for: .milliseconds(50))
        try await client.send(String(decoding: line[20...], as: UTF8.self) + SocketServerTests.fast(2))
        try await Task.sleep(for: .milliseconds(50))
        try await client.send("\n")
        let first = try await client.readReply()
        let second = try await client.readReply()
        XCTAssertEqual([first.id, second.id], [1, 2])
        XCTAssertEqual(second.result?.accessToken, "at-1")
        XCTAssertEqual(server.acceptor.adopted.load(ordering: .relaxed), 0)
    }

    /// `printf '{...}' | socat`: the last line has no newline and the client half-closes. The loop hands the bytes to
    /// NIO, whose decoder serves a final line without a newline, and the connection closes after the reply.
    func testALastLineWithoutANewlineBeforeAHalfCloseIsAnswered() async throws {
        let server = try await start()
        let client = try await TestClient.connect(path)
        try await client.send(SocketServerTests.fast(1) + "\n" + SocketServerTests.fast(2))
        client.shutdownWrite()
        let ids = [try await client.readID(), try await client.readID()]
        XCTAssertEqual(ids, [1, 2])
        let end = try await client.readLine()
        XCTAssertNil(end, "closed after the last reply")
        XCTAssertEqual(server.acceptor.adopted.load(ordering: .relaxed), 1)
    }

    /// A request line longer than the loop buffers is handed to NIO part-way and answered there in one piece.
    func testALongPartialLineIsHandedOffAndAnsweredWhole() async throws {
        let server = try await start()
        let client = try await TestClient.connect(path)
        let padding = String(repeating: " ", count: AcceptLoop.maxPartialLine + 500)
        let line = #"{"v":1,"id":9,"op":"token","account":"work","#  + padding + #""min_valid":0}"#
        try await client.send(String(line.prefix(AcceptLoop.maxPartialLine + 100)))
        for _ in 0..<200 where server.acceptor.adopted.load(ordering: .relaxed) == 0 {
            try await Task.sleep(for: .milliseconds(10))
        }
        XCTAssertEqual(server.acceptor.adopted.load(ordering: .relaxed), 1, "handed off before the line was complete")
        try await client.send(String(line.dropFirst(AcceptLoop.maxPartialLine + 100)) + "\n")
        let reply = try await client.readReply()
        XCTAssertEqual(reply.id, 9)
        XCTAssertEqual(reply.result?.accessToken, "at-1")
    }

    /// A client that sends thousands of requests before it reads any reply: the loop answers until the socket stops
    /// taking its replies, hands the connection to NIO with the unsent rest of the reply and the unread lines, and
    /// the client gets every reply exactly once.
    func testAClientThatDoesNotReadGetsEveryReplyExactlyOnce() async throws {
        let server = try await start()
        let client = try await TestClient.connect(path)
        let count = 4000
        let requests = (1...count).map { SocketServerTests.fast($0) + "\n" }.joined()
        let sending = Task { try await client.send(requests) }
        // Let the agent fill the socket's buffer with replies before reading any.
        for _ in 0..<300 where server.acceptor.adopted.load(ordering: .relaxed) == 0 {
            try await Task.sleep(for: .milliseconds(10))
        }
        XCTAssertEqual(server.acceptor.adopted.load(ordering: .relaxed), 1, "the full socket handed it to NIO")
        var ids: [Int] = []
        for _ in 0..<count {
            let id = try await client.readID()
            ids.append(try XCTUnwrap(id))
        }
        try await sending.value
        XCTAssertEqual(ids.count, count)
        XCTAssertEqual(Set(ids).count, count, "a reply was repeated or lost")
        XCTAssertEqual(ids.first, 1)
    }
}

/// Requests for an account whose token is being refreshed wait in the accept loop (parked on the snapshot), not as
/// a channel and a task each, and are answered when the refresh ends: from the loop with the new token, or by the
/// slow path when the refresh brought none.
extension SocketServerTests {
    func testRequestsWaitingForARefreshAreParkedAndAnsweredFromTheLoop() async throws {
        let server = try await start(cached: false)
        let broker = server.dispatcher.operations.broker
        broker.snapshot.refreshStarted("work")
        var clients: [TestClient] = []
        for id in 1...3 {
            let client = try await TestClient.connect(path)
            try await client.send(SocketServerTests.fast(id) + "\n")
            clients.append(client)
        }
        try await Task.sleep(for: .milliseconds(100))
        XCTAssertEqual(server.acceptor.adopted.load(ordering: .relaxed), 0, "parked, not handed off")
        XCTAssertEqual(server.acceptor.slowRequests.load(ordering: .relaxed), 0)
        await broker.install("work", access: "at-new", lifetime: .seconds(3600))
        broker.snapshot.refreshEnded("work")
        for (index, client) in clients.enumerated() {
            let reply = try await client.readReply()
            XCTAssertEqual(reply.id, index + 1)
            XCTAssertEqual(reply.result?.accessToken, "at-new")
        }
        XCTAssertEqual(server.acceptor.adopted.load(ordering: .relaxed), 0, "answered from the loop")
        XCTAssertEqual(server.acceptor.slowRequests.load(ordering: .relaxed), 0)
    }

    func testARefreshThatBringsNoTokenHandsItsParkedRequestsToTheSlowPath() async throws {
        let server = try await start(cached: false)
        let broker = server.dispatcher.operations.broker
        broker.snapshot.refreshStarted("work")
        let client = try await TestClient.connect(path)
        // What the client sends while parked is kept and answered after the parked request.
        try await client.send(SocketServerTests.fast(1) + "\n")
        try await Task.sleep(for: .milliseconds(50))
        try await client.send(#"{"v":1,"id":2,"op":"ping"}"# + "\n")
        try await Task.sleep(for: .milliseconds(50))
        XCTAssertEqual(server.acceptor.adopted.load(ordering: .relaxed), 0)
        broker.snapshot.refreshEnded("work")
        struct Reply: Decodable {
            struct Failure: Decodable { var code: String }
            var id: Int?
            var error: Failure?
        }
        var replies: [Int: Reply] = [:]
        for _ in 0..<2 {
            let line = try await client.readLine()
            let reply = try JSONDecoder().decode(Reply.self, from: Data(XCTUnwrap(line).utf8))
            replies[try XCTUnwrap(reply.id)] = reply
        }
        XCTAssertEqual(replies[1]?.error?.code, "login_required", "the broker's answer for an account never signed in")
        XCTAssertNil(replies[2]?.error, "the ping sent while parked")
        XCTAssertEqual(server.acceptor.adopted.load(ordering: .relaxed), 1)
    }
}
