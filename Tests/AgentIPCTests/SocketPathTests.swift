@testable import AgentIPC
#if canImport(Glibc)
import Glibc
#endif
import XCTest

/// The socket address both the agent (bind) and the clients (connect) build from a path.
final class SocketPathTests: XCTestCase {
    func testAddressHoldsThePathUpToItsLimitAndNoFurther() throws {
        XCTAssertEqual(SocketPath.maxAddressBytes, 107)
        let longest = "/" + String(repeating: "a", count: SocketPath.maxAddressBytes - 1)
        var address = try XCTUnwrap(SocketPath.address(longest))
        XCTAssertEqual(Int32(address.sun_family), AF_UNIX)
        let stored = withUnsafeBytes(of: &address.sun_path) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        XCTAssertEqual(stored, longest)
        XCTAssertNil(SocketPath.address(longest + "a"))
        // Counted in bytes, not characters.
        XCTAssertNil(SocketPath.address("/" + String(repeating: "é", count: 54)))
    }

    func testAClientRefusesAPathTooLongForAnAddress() {
        let path = "/tmp/" + String(repeating: "x", count: 200)
        XCTAssertThrowsError(try AgentClient(path: path)) { error in
            XCTAssertEqual(error as? ClientError, .io("socket path is too long (205 bytes, at most 107): \(path)"))
        }
    }
}
