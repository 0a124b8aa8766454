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
            WireRequest(op: .token, id: 1) { $0.account = "work"; $0.minValid = 0 },
            WireRequest(op: .token, id: -7) {
                $0.account = awkward; $0.minValid = 86_400; $0.forceRefresh = true; $0.interactive = false; $0.idToken = true
                $0.method = LoginMethodName.preferDevice.rawValue; $0.scopes = ["read", awkward, ""]; $0.resource = "https://api.example/x"
            },
            WireRequest(op: .login, id: 2) { $0.account = "w"; $0.browser = false; $0.method = LoginMethodName.device.rawValue },
            WireRequest(op: .loginCallback, id: 3) { $0.url = "http://127.0.0.1:1/cb?code=" + awkward },
            WireRequest(op: .audit, id: 4) { $0.account = "w"; $0.since = 1_800_000_000; $0.before = 99 },
            WireRequest(op: .approve, id: 5) { $0.request = 12 },
            WireRequest(op: .forget, id: 6) { $0.account = "w"; $0.client = "/usr/bin/" + awkward },
            WireRequest(op: .token, id: 8) { $0.scopes = [] },
            WireRequest.everyMember,
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
        XCTAssertEqual(WireRequest(op: .token, id: 1) { $0.account = "work"; $0.minValid = 0 }.line,
                       #"{"v":1,"id":1,"op":"token","account":"work","min_valid":0}"#)
        XCTAssertEqual(WireRequest(op: .status).line, #"{"v":1,"op":"status"}"#)
    }

    /// The line of a request with every member is the one the writer wrote before its members were a table (issue 48):
    /// same names, same order.
    func testEveryMemberIsWrittenAsBefore() {
        XCTAssertEqual(WireRequest.everyMember.line, #"{"v":1,"id":9,"op":"token","account":"a","min_valid":1,"force_refresh":true,"#
                       + #""interactive":false,"id_token":true,"browser":false,"url":"u","method":"device","scopes":["s","t"],"#
                       + #""resource":"r","since":2,"before":3,"request":4,"client":"c","dpop_method":"GET","dpop_url":"d","#
                       + #""dpop_nonce":"n","host":"h","session":"e","pid":5,"fingerprint":"f","program":"p","this_run":true}"#)
    }
}

extension WireRequest {
    static let everyMember = WireRequest(op: .token, id: 9) {
        $0.account = "a"; $0.minValid = 1; $0.forceRefresh = true; $0.interactive = false; $0.idToken = true; $0.browser = false
        $0.url = "u"; $0.method = "device"; $0.scopes = ["s", "t"]; $0.resource = "r"; $0.since = 2; $0.before = 3
        $0.request = 4; $0.client = "c"; $0.dpopMethod = "GET"; $0.dpopURL = "d"; $0.dpopNonce = "n"; $0.host = "h"
        $0.session = "e"; $0.pid = 5; $0.fingerprint = "f"; $0.program = "p"; $0.thisRun = true
    }
}
