import AgentIPC
import Foundation
import XCTest

#if canImport(Glibc)
import Glibc
#endif

/// A stand-in for the agent on a real Unix socket: accepts one connection, reads one request line, answers with
/// `lines` (each followed by a newline) and closes.
final class CannedAgent {
    let path: String
    private let directory: String
    private let listener: Int32

    /// `pauseBeforeLast`: the last line is sent that long after the others (a person answering a question).
    init(_ lines: [[UInt8]], pauseBeforeLast: Duration = .zero) throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("canned-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        path = directory + "/agent.sock"
        let listener = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        self.listener = listener
        var address = try XCTUnwrap(SocketPath.address(path))
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard bound == 0, listen(listener, 1) == 0 else { throw POSIXError(.EADDRINUSE) }
        Thread {
            let connection = accept(listener, nil, nil)
            guard connection >= 0 else { return }
            defer { close(connection) }
            var byte: UInt8 = 0
            while recv(connection, &byte, 1, 0) == 1, byte != 0x0A {}
            for (index, line) in lines.enumerated() {
                if index == lines.count - 1, pauseBeforeLast > .zero {
                    Thread.sleep(forTimeInterval: Double(pauseBeforeLast.components.seconds)
                                 + Double(pauseBeforeLast.components.attoseconds) / 1e18)
                }
                let bytes = line + [0x0A]
                _ = bytes.withUnsafeBytes { send(connection, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            }
        }.start()
    }

    convenience init(_ lines: [String]) throws { try self.init(lines.map { Array($0.utf8) }) }

    deinit {
        shutdown(listener, Int32(SHUT_RDWR))
        close(listener)
        try? FileManager.default.removeItem(atPath: directory)
    }
}

/// `authctl`'s reading of the agent's replies through ``AgentClient``, over a real socket: every reply line is read
/// as strictly as the agent reads requests (docs/PROTOCOL.md), so a line a lenient JSON reader would take but the
/// strict one refuses is a protocol violation, not a result.
final class StrictReplyTests: XCTestCase {
    static let agent = #"{"version":"1.2","protocol":1,"pid":7,"uptime_s":5,"socket":"/s","keyring":"available"}"#

    private func status(_ lines: [String], onEvent: (WireEvent) -> Void = { _ in }) throws -> StatusResult {
        let agent = try CannedAgent(lines)
        return try AgentClient(path: agent.path, replyTimeout: .seconds(10)).call(WireRequest(op: .status), as: StatusResult.self,
                                                                                  onEvent: onEvent)
    }

    private func assertViolation(_ line: String, _ why: String, file: StaticString = #filePath, line number: UInt = #line) {
        XCTAssertThrowsError(try status([line]), why, file: file, line: number) { error in
            guard case ClientError.protocolViolation = error else {
                return XCTFail("\(why): \(error)", file: file, line: number)
            }
        }
    }

    func testReadsResultsEventsAndErrors() throws {
        var events: [WireEvent] = []
        let result = try status([
            #"{"v":1,"id":1,"event":{"type":"login_started","url":"https://x/a","browser_opened":true,"timeout_s":300}}"#,
            #" {"v":1,"id":1,"result":{"agent":\#(StrictReplyTests.agent),"accounts":[],"future":{"a":[1,true,null]}},"error":null} "#,
        ]) { events.append($0) }
        XCTAssertEqual(events, [WireEvent(type: "login_started") { $0.url = "https://x/a"; $0.browserOpened = true; $0.timeoutSeconds = 300 }])
        XCTAssertEqual(result, StatusResult(agent: .init(version: "1.2", pid: 7, uptimeSeconds: 5, socket: "/s", keyring: "available"),
                                            accounts: []))
        XCTAssertThrowsError(try status([#"{"v":1,"id":1,"error":{"code":"brand_new","message":"m","retry_after":30}}"#])) { error in
            guard case ClientError.agent(let agentError) = error else { return XCTFail("\(error)") }
            XCTAssertEqual([agentError.code, agentError.message, agentError.retryAfter.map(String.init)], ["brand_new", "m", "30"])
        }
    }

    /// Every line the agent sends for a request echoes its id (a client's first request is id 1); only an error may
    /// carry none, when the agent could not read the request's id. A line for another request is not this one's.
    func testRepliesMustCarryTheRequestsID() throws {
        let result = #"{"v":1,"id":1,"result":{"agent":\#(StrictReplyTests.agent),"accounts":[]}}"#
        for (lines, why) in [([result.replacingOccurrences(of: #""id":1"#, with: #""id":2"#)], "a result for another request"),
                             ([result.replacingOccurrences(of: #""id":1,"#, with: "")], "a result without id"),
                             ([result.replacingOccurrences(of: #""id":1"#, with: #""id":null"#)], "a result with a null id"),
                             ([#"{"v":1,"id":0,"error":{"code":"login_required","message":"m"}}"#], "an error for another request"),
                             ([#"{"v":1,"id":2,"event":{"type":"login_started"}}"#, result], "an event for another request"),
                             ([#"{"v":1,"event":{"type":"login_started"}}"#, result], "an event without id")] {
            XCTAssertThrowsError(try status(lines), why) { error in
                guard case ClientError.protocolViolation = error else { return XCTFail("\(why): \(error)") }
            }
        }
        for line in [#"{"v":1,"error":{"code":"message_too_large","message":"m"}}"#,
                     #"{"v":1,"id":null,"error":{"code":"bad_request","message":"m"}}"#] {
            XCTAssertThrowsError(try status([line]), line) { error in
                guard case ClientError.agent = error else { return XCTFail("\(line): \(error)") }
            }
        }
    }

    /// Each of these was read as a result (or an agent error) by the JSONDecoder the client used before.
    func testRefusesWhatOnlyALenientReaderTakes() {
        let result = #""result":{"agent":\#(StrictReplyTests.agent),"accounts":[]"#
        assertViolation(#"{"v":1,"id":1,\#(result),"accounts":[]}}"#, "a member named twice")
        assertViolation(#"{"v":1,"id":1,\#(result),"load":1.5}}"#, "a fractional number, even in an unknown member")
        assertViolation(#"{"v":1,"id":1,\#(result.replacingOccurrences(of: #""pid":7"#, with: #""pid":7.0"#))}}"#,
                        "an integer written with a fraction")
        assertViolation(#"{"v":1,"id":1,\#(result),"deep":\#(String(repeating: "[", count: 20))\#(String(repeating: "]", count: 20))}}"#,
                        "nesting deeper than 16")
        assertViolation(#"{"v":1,"id":1,"error":{"code":"c","message":"m"},"result":{}}"#, "an error and a result")
        assertViolation(#"{"v":1,"id":1}"#, "neither error nor result")
        assertViolation(#"{"v":1,"id":"1",\#(result)}}"#, "an id that is not an integer")
        assertViolation(#"{"v":2,"id":1,\#(result)}}"#, "another protocol version")
        assertViolation(#"{"v":1,"id":1,\#(result.replacingOccurrences(of: #""pid":7"#, with: #""pid":"7""#))}}"#,
                        "a member of the wrong type")
    }

    func testRefusesTrailingBytesAndInvalidUTF8() throws {
        let open = Array(#"{"v":1,"id":1,"result":{"agent":\#(StrictReplyTests.agent),"accounts":[]"#.utf8)
        for (line, why) in [(open + Array("}} x".utf8), "bytes after the object"), (open + Array("}}{}".utf8), "a second object"),
                            (open + Array(#","x":""#.utf8) + [0xFF] + Array(#""}}"#.utf8), "invalid UTF-8")] {
            let agent = try CannedAgent([line])
            XCTAssertThrowsError(try AgentClient(path: agent.path).call(WireRequest(op: .status), as: StatusResult.self), why) { error in
                guard case ClientError.protocolViolation = error else { return XCTFail("\(why): \(error)") }
            }
        }
    }

    /// A `token` call reads events, then its result, and refuses lines that break the envelope rules.
    func testTokenReadsEventsThenTheResultAndRefusesWhatCallRefuses() throws {
        let result = #""result":{"account":"work","access_token":"T","token_type":"Bearer","expires_in":60,"expires_at":1800000060}"#
        var events: [WireEvent] = []
        let agent = try CannedAgent([#"{"v":1,"id":1,"event":{"type":"consent_required","request":4,"client":"/usr/bin/git"}}"#,
                                     #"{"v":1,"id":1,\#(result)}"#])
        let token = try AgentClient(path: agent.path).call(WireRequest(op: .token) { $0.account = "work" }, as: TokenResult.self) { events.append($0) }
        XCTAssertEqual(token, TokenResult(account: "work", accessToken: "T", tokenType: "Bearer", expiry: .after(seconds: 60, unixTime: 1800000060),
                                          scopes: nil, idToken: nil))
        XCTAssertEqual(events, [WireEvent(type: "consent_required") { $0.request = 4; $0.client = "/usr/bin/git" }])

        for line in [#"{"v":1,"id":1,\#(result),"result":{}}"#, #"{"v":1,"id":1,\#(result),"x":0.5}"#,
                     #"{"v":1,"id":1,"error":{"code":"c","message":"m"},"result":{}}"#] {
            let agent = try CannedAgent([line])
            XCTAssertThrowsError(try AgentClient(path: agent.path).call(WireRequest(op: .token) { $0.account = "work" }, as: TokenResult.self), line) { error in
                guard case ClientError.protocolViolation = error else { return XCTFail("\(line): \(error)") }
            }
        }
    }

    /// A `token` call takes only the lines that answer its request.
    func testTokenRepliesMustCarryTheRequestsID() throws {
        let result = #"{"v":1,"id":1,"result":{"account":"work","access_token":"T","token_type":"Bearer","expires_in":60,"expires_at":1800000060}}"#
        for (lines, why) in [([result.replacingOccurrences(of: #""id":1"#, with: #""id":2"#)], "a token for another request"),
                             ([result.replacingOccurrences(of: #""id":1,"#, with: "")], "a token without id"),
                             ([#"{"v":1,"id":2,"error":{"code":"login_required","message":"m"}}"#], "an error for another request"),
                             ([#"{"v":1,"id":2,"event":{"type":"consent_required","request":4}}"#, result], "an event for another request")] {
            let agent = try CannedAgent(lines)
            XCTAssertThrowsError(try AgentClient(path: agent.path).call(WireRequest(op: .token) { $0.account = "work" }, as: TokenResult.self), why) { error in
                guard case ClientError.protocolViolation = error else { return XCTFail("\(why): \(error)") }
            }
        }
        let agent = try CannedAgent([#"{"v":1,"error":{"code":"message_too_large","message":"m"}}"#])
        XCTAssertThrowsError(try AgentClient(path: agent.path).call(WireRequest(op: .token) { $0.account = "work" }, as: TokenResult.self)) { error in
            XCTAssertEqual(error as? ClientError, .agent(WireError(.messageTooLarge, "m")))
        }
    }

    func testARefusedReplyDoesNotRepeatTheToken() throws {
        let canary = "CANARY-\(UUID().uuidString)"
        let agent = try CannedAgent([#"{"v":1,"id":1,"result":{"account":"w","access_token":"\#(canary)","token_type":"Bearer","expires_in":"soon","expires_at":1}}"#])
        XCTAssertThrowsError(try AgentClient(path: agent.path).call(WireRequest(op: .token) { $0.account = "w" }, as: TokenResult.self)) { error in
            guard case ClientError.protocolViolation(let message) = error else { return XCTFail("\(error)") }
            XCTAssertFalse("\(error) \(message)".contains(canary))
        }
    }
}

/// The reply limit of a call and a person's time: a question the agent asks a person (`consent_required`, with its
/// `timeout_s`) moves the limit to that wait plus the call's own, so an answer given within the agent's
/// `consent_timeout` is never cut off by authctl's shorter network limit.
final class ReplyLimitTests: XCTestCase {
    func testAQuestionToAPersonExtendsTheCallsLimitByItsOwnTime() throws {
        let event = #"{"v":1,"id":1,"event":{"type":"consent_required","request":3,"client":"/usr/bin/git","timeout_s":30}}"#
        let result = #"{"v":1,"id":1,"result":{"agent_version":"1.2","protocol":1}}"#
        let agent = try CannedAgent([Array(event.utf8), Array(result.utf8)], pauseBeforeLast: .milliseconds(1500))
        var heard: [WireEvent] = []
        let ping = try AgentClient(path: agent.path, replyTimeout: .seconds(1))
            .call(WireRequest(op: .ping), as: PingResult.self) { heard.append($0) }
        XCTAssertEqual(ping.agentVersion, "1.2", "answered after the call's own 1 s, within the question's 30 s")
        XCTAssertEqual(heard.map(\.type), ["consent_required"])
    }

    func testWithoutAQuestionTheLimitHolds() throws {
        let result = #"{"v":1,"id":1,"result":{"agent_version":"1.2","protocol":1}}"#
        let agent = try CannedAgent([Array(result.utf8)], pauseBeforeLast: .milliseconds(1500))
        XCTAssertThrowsError(try AgentClient(path: agent.path, replyTimeout: .seconds(1))
            .call(WireRequest(op: .ping), as: PingResult.self)) { error in
            guard case ClientError.timeout = error else { return XCTFail("\(error)") }
        }
    }
}

