@testable import AgentServer
import NIOCore
import NIOEmbedded
import XCTest

/// ``AcceptGate`` on an embedded listening channel, fed accepted children by hand: it pauses accepting at its
/// ceiling, counts a connection until its close has completed (not when the agent decided to close it), and
/// resumes once one is gone.
final class AcceptGateTests: XCTestCase {
    func testPausesAtTheCeilingAndResumesWhenAConnectionHasClosed() throws {
        let gate = AcceptGate(ceiling: 3)
        let server = EmbeddedChannel(handler: gate)
        let children = (0..<3).map { _ in EmbeddedChannel(loop: server.embeddedEventLoop) }
        for child in children.prefix(2) { try server.writeInbound(child as any Channel) }
        XCTAssertFalse(gate.isPaused, "under the ceiling")
        try server.writeInbound(children[2] as any Channel)
        XCTAssertTrue(gate.isPaused, "the third open connection reaches the ceiling")
        XCTAssertEqual(gate.open.load(ordering: .relaxed), 3)
        // Every accepted child is passed on to the acceptor.
        for _ in 0..<3 { XCTAssertNotNil(try server.readInbound(as: (any Channel).self)) }

        // The count drops when the close completes; the resume runs on the listening channel's loop.
        _ = try? children[0].finish()
        server.embeddedEventLoop.run()
        XCTAssertEqual(gate.open.load(ordering: .relaxed), 2)
        XCTAssertFalse(gate.isPaused, "one closed: accepting resumes")
        XCTAssertEqual(gate.pauses.load(ordering: .relaxed), 1)
        XCTAssertEqual(gate.peak.load(ordering: .relaxed), 3)
        _ = try? children[1].finish()
        _ = try? children[2].finish()
        server.embeddedEventLoop.run()
        XCTAssertEqual(gate.open.load(ordering: .relaxed), 0)
    }

    func testStaysPausedWhileTheCountIsAtTheCeiling() throws {
        let gate = AcceptGate(ceiling: 2)
        let server = EmbeddedChannel(handler: gate)
        let children = (0..<4).map { _ in EmbeddedChannel(loop: server.embeddedEventLoop) }
        // Accepts already under way when the pause took effect (a read takes several at once) still count.
        for child in children { try server.writeInbound(child as any Channel) }
        XCTAssertEqual(gate.open.load(ordering: .relaxed), 4)
        XCTAssertEqual(gate.pauses.load(ordering: .relaxed), 1, "paused once, not once per connection")
        _ = try? children[0].finish()
        _ = try? children[1].finish()
        server.embeddedEventLoop.run()
        XCTAssertTrue(gate.isPaused, "2 open is still the ceiling")
        _ = try? children[2].finish()
        server.embeddedEventLoop.run()
        XCTAssertFalse(gate.isPaused)
        _ = try? children[3].finish()
    }
}
