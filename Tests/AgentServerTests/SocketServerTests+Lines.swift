#if canImport(Glibc)
import Glibc
#endif
@testable import AgentServer
@testable import AgentAccess
@testable import AuthCore
import Foundation
import XCTest

/// The accept loop's edges on a real socket: lines split across reads, a last line without a newline, long lines, a
/// client that does not read its replies: nothing the client sent or was sent is lost or repeated.
extension SocketServerTests {
    /// The same bytes again give the same request, and any other line (another id, another account) its own.
    func testRepeatedAndChangedLinesAreEachAnsweredForWhatTheySay() async throws {
        _ = try await start()
        let first = try await TestClient.connect(path)
        try await first.send(SocketServerTests.fast(5) + "\n" + SocketServerTests.fast(5) + "\n" + SocketServerTests.fast(6) + "\n")
        var ids: [Int?] = []
        for _ in 0..<3 {
            let reply = try await first.readReply()
            XCTAssertEqual(reply.result?.accessToken, "at-1")
            ids.append(reply.id)
        }
        XCTAssertEqual(ids.compactMap { $0 }.sorted(), [5, 5, 6])
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
    }

    func testALineSplitAcrossReadsIsAnswered() async throws {
        _ = try await start()
        let client = try await TestClient.connect(path)
        let line = Array((SocketServerTests.fast(1) + "\n").utf8)
        try await client.send(String(decoding: line[..<20], as: UTF8.self))
        try await Task.sleep(for: .milliseconds(50))
        try await client.send(String(decoding: line[20...], as: UTF8.self) + SocketServerTests.fast(2))
        try await Task.sleep(for: .milliseconds(50))
        try await client.send("\n")
        let first = try await client.readReply()
        let second = try await client.readReply()
        XCTAssertEqual(Set([first.id, second.id]), [1, 2])
        XCTAssertEqual([first.result?.accessToken, second.result?.accessToken], ["at-1", "at-1"])
    }

    /// `printf '{...}' | socat`: the last line has no newline and the client half-closes. It is still a request, and
    /// the connection closes after the reply.
    func testALastLineWithoutANewlineBeforeAHalfCloseIsAnswered() async throws {
        _ = try await start()
        let client = try await TestClient.connect(path)
        try await client.send(SocketServerTests.fast(1) + "\n" + SocketServerTests.fast(2))
        client.shutdownWrite()
        let ids = [try await client.readID(), try await client.readID()]
        XCTAssertEqual(Set(ids), [1, 2])
        let end = try await client.readLine()
        XCTAssertNil(end, "closed after the last reply")
    }

    /// A request line of 60 KiB (under the 64 KiB cap) arriving in pieces is answered in one piece.
    func testALongLineArrivingInPiecesIsAnsweredWhole() async throws {
        _ = try await start()
        let client = try await TestClient.connect(path)
        let padding = String(repeating: " ", count: 60 * 1024)
        let line = #"{"v":1,"id":9,"op":"token","account":"work","#  + padding + #""min_valid":0}"#
        let pieces = stride(from: 0, to: line.utf8.count, by: 7000).map { Array(line.utf8).dropFirst($0).prefix(7000) }
        for piece in pieces { try await client.send(String(decoding: piece, as: UTF8.self)) }
        try await client.send("\n")
        let reply = try await client.readReply()
        XCTAssertEqual(reply.id, 9)
        XCTAssertEqual(reply.result?.accessToken, "at-1")
    }

    /// A client that sends thousands of requests before it reads any reply: the loop answers until the socket stops
    /// taking its replies, keeps the rest up to its output limit, stops reading (the client's writes wait in the
    /// kernel), and resumes as the client reads: the client gets every reply exactly once (matched by id: each
    /// request is a task of its own, so replies may overtake each other).
    func testAClientThatDoesNotReadGetsEveryReplyExactlyOnce() async throws {
        _ = try await start()
        let client = try await TestClient.connect(path)
        let count = 4000
        let requests = (1...count).map { SocketServerTests.fast($0) + "\n" }.joined()
        let sending = Task { try await client.send(requests) }
        var ids: [Int] = []
        for _ in 0..<count {
            let id = try await client.readID()
            ids.append(try XCTUnwrap(id))
        }
        try await sending.value
        XCTAssertEqual(ids.count, count)
        XCTAssertEqual(ids.sorted(), Array(1...count), "a reply was repeated or lost")
    }
}
