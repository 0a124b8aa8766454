import AuthCore
import XCTest

/// A grant's narrower tokens (`authctl grant --scope`, `--resource`): what a request through it is served with, and
/// whether the token the server gave stays within it. Never wider than granted.
final class GrantScopeTests: XCTestCase {
    let narrow = ClientIdentity.Grant(name: "ci", accounts: ["work"], scopes: ["openid", "repo"], resource: "https://api.example")

    func testARequestIsServedWithinItsGrantAndTheGrantsOwnWhenItAsksForNone() throws {
        let unasked = try XCTUnwrap(narrow.served(scopes: nil, resource: nil))
        XCTAssertEqual(unasked.scopes, ["openid", "repo"])
        XCTAssertEqual(unasked.resource, "https://api.example")
        XCTAssertEqual(try XCTUnwrap(narrow.served(scopes: [], resource: nil)).scopes, ["openid", "repo"], "no scopes: the grant's")
        let fewer = try XCTUnwrap(narrow.served(scopes: ["repo"], resource: "https://api.example"))
        XCTAssertEqual(fewer.scopes, ["repo"])
        XCTAssertEqual(fewer.resource, "https://api.example")
    }

    func testAnythingOutsideTheGrantIsRefusedNotWidened() {
        XCTAssertNil(narrow.served(scopes: ["repo", "admin"], resource: nil))
        XCTAssertNil(narrow.served(scopes: nil, resource: "https://other.example"))
    }

    func testAGrantThatNarrowsNothingPassesTheRequestOn() throws {
        let open = ClientIdentity.Grant(name: "open", accounts: ["work"])
        XCTAssertFalse(open.narrows)
        let served = try XCTUnwrap(open.served(scopes: ["anything"], resource: "https://x.example"))
        XCTAssertEqual(served.scopes, ["anything"])
        XCTAssertEqual(served.resource, "https://x.example")
        XCTAssertTrue(open.holds(nil))
        let resourceOnly = ClientIdentity.Grant(name: "r", accounts: ["work"], resource: "https://api.example")
        XCTAssertEqual(try XCTUnwrap(resourceOnly.served(scopes: ["repo"], resource: nil)).scopes, ["repo"])
    }

    func testATokenWiderThanTheGrantDoesNotHold() {
        XCTAssertTrue(narrow.holds(["repo"]))
        XCTAssertTrue(narrow.holds(["openid", "repo"]))
        XCTAssertFalse(narrow.holds(["openid", "repo", "admin"]), "a server that ignored the narrower scope")
        XCTAssertFalse(narrow.holds(nil), "scopes nobody named: not known to be within")
    }
}
