@testable import AgentIPC
import FoundationEssentials
import XCTest

/// authctl's hand-written token request and reply reader must agree with the reader every other reply goes through
/// (``ReplyReader``: ``MiniJSON`` and ``MiniJSONDecoder``) on every line it accepts.
final class TokenWireTests: XCTestCase {
    /// What `AgentClient.call(_:as: TokenResult.self)` makes of the line for request `id`; nil for events and
    /// refused lines.
    private func codable(_ line: String, request id: Int = 1) -> TokenWire.Reply? {
        do {
            return try ReplyReader.read(Array(line.utf8), as: TokenResult.self, request: id) { _ in }.map { .result($0) }
        } catch {
            if case .agent(let error) = error { return .error(error) }
            return nil
        }
    }

    private func fast(_ line: String, request id: Int = 1) -> TokenWire.Reply? { TokenWire.decode(Array(line.utf8), request: id) }

    func testReadsTokenResultsAndErrorsAsTheClientDoes() throws {
        let lines = [
            (1, #"{"v":1,"id":1,"result":{"account":"work","access_token":"abc.def","token_type":"Bearer","expires_in":3599,"expires_at":1800000000,"scopes":["openid","email"]}}"#),
            (7, #"{"id":7,"v":1,"result":{"account":"w\u00e9rk \"q\" \\ \/","access_token":"t","token_type":"Bearer","expires_in":0,"expires_at":-1,"scopes":null,"id_token":"x.y.z","extra":{"a":[1,true,null]}}}"#),
            (3, #" { "v" : 1 , "id" : 3 , "result" : { "account" : "a\ud83d\ude00" , "access_token" : "t" , "token_type" : "DPoP" , "expires_in" : 5 , "expires_at" : 6 } } "#),
            (2, #"{"v":1,"id":2,"error":{"code":"login_required","message":"sign in: authctl login work"}}"#),
            (4, #"{"v":1,"id":null,"error":{"code":"some_future_code","message":"m","retry_after":30},"result":null}"#),
            (5, #"{"v":1,"error":{"code":"message_too_large","message":"m"}}"#),
        ]
        for (id, line) in lines {
            let expected = try XCTUnwrap(codable(line, request: id), line)
            XCTAssertEqual(fast(line, request: id), expected, line)
        }
    }

    /// A line for another request, or a result without the request's id, is not this request's answer: the fast
    /// path leaves it to ``ReplyReader``, which refuses it.
    func testLeavesLinesForAnotherRequestToTheClient() {
        let result = #""result":{"account":"a","access_token":"t","token_type":"B","expires_in":1,"expires_at":6}"#
        for line in [#"{"v":1,"id":2,\#(result)}"#, #"{"v":1,\#(result)}"#, #"{"v":1,"id":null,\#(result)}"#,
                     #"{"v":1,"id":0,"error":{"code":"c","message":"m"}}"#, #"{"v":1,"id":-1,"error":{"code":"c","message":"m"}}"#] {
            XCTAssertNil(fast(line), line)
            XCTAssertThrowsError(try ReplyReader.read(Array(line.utf8), as: TokenResult.self, request: 1) { _ in }, line) { error in
                guard case ClientError.protocolViolation = error else { return XCTFail("\(line): \(error)") }
            }
        }
    }

    func testLeavesEventsAndOddLinesToTheClient() {
        for line in [
            #"{"v":1,"id":1,"event":{"type":"login_started","url":"http://x"}}"#,
            #"{"v":2,"id":1,"result":{}}"#,
            #"{"v":1.0,"id":1,"error":{"code":"c","message":"m"}}"#,
            #"{"v":1,"id":"1","error":{"code":"c","message":"m"}}"#,
            #"{"v":1,"id":1,"result":{"account":"a","access_token":"t","token_type":"B","expires_in":1e3,"expires_at":6}}"#,
            #"{"v":1,"id":1,"result":{"account":"a","access_token":"t","token_type":"B","expires_in":1,"expires_at":6,"scopes":[1]}}"#,
            #"{"v":1,"id":1,"result":{"account":"a","account":"b","access_token":"t","token_type":"B","expires_in":1,"expires_at":6}}"#,
            #"{"v":1,"id":1,"result":{"account":"a","access_token":"t","token_type":"B","expires_in":1}}"#,
            #"{"v":1,"error":{"code":"c","message":"m"},"result":5}"#,
            #"{"v":1,"error":{"code":"c","message":"m"}} x"#,
            #"{"v":1,"error":{"code":"c\ud800","message":"m"}}"#,
            "{\"v\":1,\"error\":{\"code\":\"c\u{1}\",\"message\":\"m\"}}",
            #"{"v":01,"error":{"code":"c","message":"m"}}"#, "", "[]", "null",
        ] {
            XCTAssertNil(fast(line), line)
            XCTAssertNil(codable(line), "an event, or refused by the client too: \(line)")
        }
        XCTAssertNil(TokenWire.decode([0x7B, 0x22, 0xFF, 0x22, 0x3A, 0x31, 0x7D], request: 1), "invalid UTF-8")
    }

    func testTheHandWrittenRequestDecodesToTheSameRequest() throws {
        for request in [
            WireRequest(op: .token, id: 1, account: "work"),
            WireRequest(op: .token, id: 2, account: "we\"ird\\\n\u{1}é😀", minValid: 600, forceRefresh: true, interactive: false,
                        idToken: true, method: .preferDevice, scopes: ["read", "write admin"], resource: "https://api.example.com/x?y=1"),
            WireRequest(op: .token, id: 3, account: "a", scopes: []),
            WireRequest(op: .token, id: 4, account: "a", scopes: ["one"]),
        ] {
            let line = TokenWire.encode(request)
            XCTAssertEqual(try JSONDecoder().decode(WireRequest.self, from: Data(line.utf8)), request, line)
            XCTAssertFalse(line.contains("\n"))
        }
    }
}
