#if canImport(Glibc)
import Glibc
#endif
@testable import AgentServer
import Foundation
import XCTest

/// The accept loop's edges: what it keeps (lines split across reads), and when it hands a connection to NIO with the
/// bytes it read and the reply it could not send, so that nothing the client sent or was sent is lost or repeated.
extension SocketServerTests {
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
