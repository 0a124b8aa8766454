@testable import AgentServer
@testable import AgentService
import Synchronization
import XCTest

/// The connection cap (SECURITY.md 22): at the limit, the connection idle longest makes room; busy connections are
/// never evicted, and when all are busy the new one is refused. Shutdown closes every connection's input.
final class ConnectionRegistryTests: XCTestCase {
    /// Records what the registry asks of a connection's owner.
    final class Owner: ConnectionOwner {
        enum Call: Equatable { case close(Int32), closeInput(Int32) }
        let calls = Mutex<[Call]>([])
        func close(_ fd: Int32, registration: Int) { calls.withLock { $0.append(.close(fd)) } }
        func closeInput(_ fd: Int32, registration: Int) { calls.withLock { $0.append(.closeInput(fd)) } }
        var recorded: [Call] { calls.withLock { $0 } }
    }

    func testEvictsTheLongestIdleConnectionAtTheCap() throws {
        let owner = Owner()
        let registry = ConnectionRegistry(limit: 3)
        let idA = try XCTUnwrap(registry.add(.init(owner: owner, fd: 1)))
        let idB = try XCTUnwrap(registry.add(.init(owner: owner, fd: 2)))
        _ = try XCTUnwrap(registry.add(.init(owner: owner, fd: 3)))
        registry.begin(idA)  // a is busy; b is now the idle one with the oldest activity
        registry.end(idA)    // a was active after b: still b is the longest idle
        XCTAssertNotNil(registry.add(.init(owner: owner, fd: 4)))
        XCTAssertEqual(registry.count, 3)
        XCTAssertEqual(owner.recorded, [.close(2)], "the longest-idle connection, and only it, is closed")
        registry.remove(idB)  // its owner reports the close later: removing an evicted id is harmless
        XCTAssertEqual(registry.count, 3)
    }

    func testBusyConnectionsAreNeverEvicted() throws {
        let owner = Owner()
        let registry = ConnectionRegistry(limit: 2)
        registry.begin(try XCTUnwrap(registry.add(.init(owner: owner, fd: 1))))
        registry.begin(try XCTUnwrap(registry.add(.init(owner: owner, fd: 2))))
        XCTAssertNil(registry.add(.init(owner: owner, fd: 3)), "a new connection was admitted although every slot is busy")
        XCTAssertEqual(owner.recorded, [])
        XCTAssertEqual(registry.count, 2)
    }

    /// Shutdown closes the input of every connection, and of one registered after it began.
    func testShutdownClosesTheInputOfEveryConnectionAndOfLaterOnes() throws {
        let owner = Owner()
        let registry = ConnectionRegistry(limit: 4)
        _ = try XCTUnwrap(registry.add(.init(owner: owner, fd: 1)))
        registry.closeInputOfAll()
        XCTAssertEqual(owner.recorded, [.closeInput(1)])
        _ = try XCTUnwrap(registry.add(.init(owner: owner, fd: 2)))
        XCTAssertEqual(owner.recorded, [.closeInput(1), .closeInput(2)])
    }

    func testConnectionLimitStaysBelowTheOpenFileLimit() {
        XCTAssertLessThanOrEqual(SocketServer.connectionLimit(), SocketServer.maxConnections)
        XCTAssertGreaterThanOrEqual(SocketServer.connectionLimit(), 16)
    }
}
