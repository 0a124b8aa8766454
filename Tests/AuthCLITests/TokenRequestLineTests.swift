@testable import AgentIPC
@testable import AuthCLI
import XCTest

/// The line `authctl token` sends is read by the agent as the request authctl meant: every plain form (what scripts,
/// curl recipes and `git-credential` run on every use) leaves out the options it does not set, and the others carry
/// them.
final class TokenRequestLineTests: XCTestCase {
    private func line(_ arguments: [String]) throws -> [UInt8] {
        encoded(try XCTUnwrap(TokenArguments.parse(arguments), "\(arguments)"))
    }

    /// What `AgentClient.call` writes: the request with the connection's first id.
    private func encoded(_ arguments: TokenArguments) -> [UInt8] {
        var request = arguments.wireRequest(method: nil)
        request.id = 1
        return Array(request.line.utf8)
    }

    private func decoded(_ line: [UInt8]) -> WireRequest? {
        guard case .request(let request) = WireRequest.decode(line: line) else { return nil }
        return request
    }

    func testPlainFormsCarryNoOptionTheyDoNotSet() throws {
        for arguments in [["work"], ["work", "--min-valid", "300"], ["work", "--header"], ["work", "--json"]] {
            let bytes = try line(arguments)
            let request = try XCTUnwrap(decoded(bytes), "authctl token \(arguments) sends a line the agent cannot read: "
                                          + String(decoding: bytes, as: UTF8.self))
            XCTAssertEqual(request.account, "work")
            XCTAssertNil(request.forceRefresh)
            XCTAssertNil(request.interactive)
            XCTAssertNil(request.idToken)
            XCTAssertNil(request.scopes)
            XCTAssertNil(request.resource)
            XCTAssertNil(request.method)
        }
        XCTAssertEqual(String(decoding: try line(["work"]), as: UTF8.self),
                       #"{"v":1,"id":1,"op":"token","account":"work","min_valid":0}"#)
    }

    func testOptionsThatChangeTheAnswerAreSentAndReadTheSame() throws {
        for (arguments, check) in [
            (["work", "--refresh"], { (r: WireRequest) in r.forceRefresh == true }),
            (["work", "--interactive"], { (r: WireRequest) in r.interactive == true }),
            (["work", "--id-token"], { (r: WireRequest) in r.idToken == true }),
            (["work", "--scope", "read"], { (r: WireRequest) in r.scopes == ["read"] }),
        ] {
            let bytes = try line(arguments)
            let request = try XCTUnwrap(decoded(bytes), "\(arguments): the agent cannot read \(String(decoding: bytes, as: UTF8.self))")
            XCTAssertTrue(check(request), "\(arguments)")
        }
    }
}
