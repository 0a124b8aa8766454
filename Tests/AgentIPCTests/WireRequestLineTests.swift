@testable import AgentIPC
import Foundation
import XCTest

/// authctl's one request writer (``WireRequest/line``): every member, awkward strings included, is read back by the
/// agent's reader and by `JSONDecoder` as the request that was written.
final class WireRequestLineTests: XCTestCase {
    func testEveryMemberSurvivesTheAgentsReaderAndJSONDecoder() throws {
        let awkward = "a\"b\\c\nd\t\u{1}é/€\u{7f}"
        let requests = [
            WireRequest(op: .ping),
            WireRequest(op: .token, id: 1, account: "work", minValid: 0),
            WireRequest(op: .token, id: -7, account: awkward, minValid: 86_400, forceRefresh: true, interactive: false,
                        idToken: true, method: .preferDevice, scopes: ["read", awkward, ""], resource: "https://api.example/x"),
            WireRequest(op: .login, id: 2, account: "w", browser: false, method: .device),
            WireRequest(op: .loginCallback, id: 3, url: "http://127.0.0.1:1/cb?code=" + awkward),
            WireRequest(op: .audit, id: 4, account: "w", since: 1_800_000_000, before: 99),
            WireRequest(op: .approve, id: 5, request: 12),
            WireRequest(op: .forget, id: 6, account: "w", client: "/usr/bin/" + awkward),
            WireRequest(op: .token, id: 8, scopes: []),
        ]
        for request in requests {
            let line = request.line
            XCTAssertFalse(line.contains("\n"), line)
            guard case .request(let read) = WireRequest.decode(line: Array(line.utf8)) else { return XCTFail("refused: \(line)") }
            XCTAssertEqual(read, request, line)
            XCTAssertEqual(try JSONDecoder().decode(WireRequest.self, from: Data(line.utf8)), request, line)
        }
    }

    func testMembersAreWrittenInOrderAndNilOnesLeftOut() {
        XCTAssertEqual(WireRequest(op: .token, id: 1, account: "work", minValid: 0).line,
                       #"{"v":1,"id":1,"op":"token","account":"work","min_valid":0}"#)
        XCTAssertEqual(WireRequest(op: .status).line, #"{"v":1,"op":"status"}"#)
    }
}
