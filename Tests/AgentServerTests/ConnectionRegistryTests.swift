@testable import AgentServer
import NIOCore
import NIOEmbedded
import XCTest

/// The connection cap (SECURITY.md 22): at the limit, the connection idle longest makes room; busy connections are
/// never evicted, and when all are busy the new one is refused.
final class ConnectionRegistryTests: XCTestCase {
    func channel() throws -> EmbeddedChannel {
        let channel = EmbeddedChannel()
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait()
        return channel
    }

    func testEvictsTheLongestIdleConnectionAtTheCap() throws {
        let registry = ConnectionRegistry(limit: 3)
        let a = try channel(), b = try channel(), c = try channel(), d = try channel()
        let idA = try XCTUnwrap(registry.add(.channel(a)))
        let idB = try XCTUnwrap(registry.add(.channel(b)))
        _ = try XCTUnwrap(registry.add(.channel(c)))
        registry.begin(idA)  // a is busy; b is now the idle one with the oldest activity
        registry.end(idA)    // a was active after b: still b is the longest idle
        XCTAssertNotNil(registry.add(.channel(d)))
        XCTAssertEqual(registry.count, 3)
        XCTAssertFalse(b.isActive, "the longest-idle connection was not closed")
        XCTAssertTrue(a.isActive && c.isActive && d.isActive)
        registry.remove(idB)  // its task ends later: removing an evicted id is harmless
        XCTAssertEqual(registry.count, 3)
    }

    func testBusyConnectionsAreNeverEvicted() throws {
        let registry = ConnectionRegistry(limit: 2)
        let a = try channel(), b = try channel(), c = try channel()
        registry.begin(try XCTUnwrap(registry.add(.channel(a))))
        registry.begin(try XCTUnwrap(registry.add(.channel(b))))
        XCTAssertNil(registry.add(.channel(c)), "a new connection was admitted although every slot is busy")
        XCTAssertTrue(a.isActive && b.isActive)
        XCTAssertEqual(registry.count, 2)
    }

    /// A connection the accept loop is passing to NIO is busy until adopted: eviction cannot pick it, and once
    /// adopted it is an ordinary channel again (idle, so evictable).
    func testAConnectionBeingHandedOffIsNotEvictedUntilAdopted() throws {
        let registry = ConnectionRegistry(limit: 1)
        let a = try channel(), b = try channel(), c = try channel()
        let id = try XCTUnwrap(registry.add(.handingOff))
        registry.handOff(id)
        XCTAssertNil(registry.add(.channel(b)), "the connection in hand-off was evicted")
        registry.adopt(id, channel: a)
        XCTAssertNotNil(registry.add(.channel(c)), "once adopted and idle it makes room")
        XCTAssertFalse(a.isActive, "the adopted channel was closed to make room")
        XCTAssertTrue(c.isActive)
    }

    /// Once shutdown has begun, a channel adopted from the accept loop has its input closed (it still answers what
    /// it brought along).
    func testAChannelAdoptedDuringShutdownHasItsInputClosed() throws {
        let registry = ConnectionRegistry(limit: 4)
        let a = try channel()
        let id = try XCTUnwrap(registry.add(.handingOff))
        registry.handOff(id)
        registry.closeInputOfAll()
        XCTAssertTrue(a.isActive)
        registry.adopt(id, channel: a)
        XCTAssertFalse(a.isActive, "EmbeddedChannel cannot close input alone, so it was closed")
    }

    func testConnectionLimitStaysBelowTheOpenFileLimit() {
        XCTAssertLessThanOrEqual(SocketServer.connectionLimit(), SocketServer.maxConnections)
        XCTAssertGreaterThanOrEqual(SocketServer.connectionLimit(), 16)
    }
}
