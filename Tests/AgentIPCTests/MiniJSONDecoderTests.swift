@testable import AgentIPC
import Foundation
import XCTest

/// Every reply type, written by the agent's encoder (``MiniJSONEncoder``), is byte for byte what `JSONEncoder` with
/// sorted keys and unescaped slashes writes (the agent's encoder before it), and reads back equal through the client's
/// strict reader: ``MiniJSON`` and ``MiniJSONDecoder``, alone and inside a reply line (``ReplyReader``).
final class MiniJSONDecoderTests: XCTestCase {
    private func assertRoundTrip<T: Codable & Equatable & Sendable>(_ value: T, file: StaticString = #filePath, line: UInt = #line) throws {
        let bytes = try MiniJSONEncoder.encode(value)
        XCTAssertEqual(String(decoding: bytes, as: UTF8.self), try MiniJSONDecoderTests.foundation(value), file: file, line: line)
        let json = try XCTUnwrap(MiniJSON.parse(bytes), String(decoding: bytes, as: UTF8.self), file: file, line: line)
        XCTAssertEqual(try MiniJSONDecoder.decode(T.self, from: json), value, file: file, line: line)
        let reply = try MiniJSONEncoder.encode(WireResponse(id: 9, result: value))
        XCTAssertEqual(String(decoding: reply, as: UTF8.self), try MiniJSONDecoderTests.foundation(WireResponse(id: 9, result: value)),
                       file: file, line: line)
        XCTAssertEqual(try ReplyReader.read(reply, as: T.self, request: 9, onEvent: { _ in XCTFail("not an event") }), value, file: file, line: line)
    }

    /// What `JSONEncoder` writes with the options the agent's replies had: the reference for ``MiniJSONEncoder``.
    static func foundation<T: Encodable>(_ value: T) throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return String(decoding: try encoder.encode(value), as: UTF8.self)
    }

    func testEveryReplyTypeRoundTrips() throws {
        try assertRoundTrip(PingResult(agentVersion: "1.2.3"))
        try assertRoundTrip(TokenResult(account: "w", accessToken: "a.b.c", tokenType: "Bearer", expiry: .after(seconds: 59, unixTime: 1_800_000_059),
                                        scopes: ["openid", "é 😀"], idToken: "x.y.z"))
        try assertRoundTrip(TokenResult(account: "w", accessToken: "t", tokenType: "Bearer", expiry: .never, scopes: nil, idToken: nil))
        try assertRoundTrip(LoginResult(account: "w", subject: "s", email: "e@x", name: "N \"q\"", scopes: ["a"], hasRefreshToken: true,
                                        accessTokenExpiresAt: 1_800_000_000))
        try assertRoundTrip(LoginResult(account: "w", subject: nil, email: nil, name: nil, scopes: nil, hasRefreshToken: false,
                                        accessTokenExpiresAt: nil))
        try assertRoundTrip(LogoutResult(account: "w", hadRefreshToken: true, revoked: nil, revocationError: nil))
        try assertRoundTrip(LogoutResult(account: "w", hadRefreshToken: true, revoked: false, revocationError: "503"))
        try assertRoundTrip(AccountsResult(accounts: [
            AccountSummary(name: "w", issuer: "https://i", clientID: "c", redirectURI: "http://127.0.0.1/cb", scopes: []),
            AccountSummary(name: "v", issuer: "https://j", clientID: "d", redirectURI: "http://[::1]/cb", scopes: ["s"], gitHosts: ["g"]),
        ]))
        let access = AccountAccess(open: false, allowedClients: ["/usr/bin/git"], confirm: "first-use", summary: "git only")
        try assertRoundTrip(StatusResult(agent: .init(version: "1", pid: 4_000_000, uptimeSeconds: 0, socket: "/s", keyring: "locked"), accounts: [
            .init(name: "w", issuer: "https://i", clientID: "c", redirectURI: "http://127.0.0.1/cb", scopes: ["a"], signedIn: nil,
                  accessTokenExpiresAt: nil, accessTokenExpiresIn: nil, lastRefresh: nil, lastError: nil, loginPending: false),
            .init(name: "v", issuer: "https://j", clientID: "d", redirectURI: "http://127.0.0.1/cb", scopes: [], signedIn: true,
                  accessTokenExpiresAt: 1_800_000_000, accessTokenExpiresIn: -5, lastRefresh: 1_799_999_000,
                  lastError: .init(code: "server_error", message: "m", at: 1_799_999_001), loginPending: true,
                  scopedTokens: [.init(scopes: ["r"], resource: "https://api", expiresAt: 1, expiresIn: 2),
                                 .init(scopes: nil, resource: nil, expiresAt: nil, expiresIn: nil, doesNotExpire: true)],
                  access: access, signInValidUntil: 1_900_000_000, accessTokenDoesNotExpire: nil, signInEnded: true),
        ]))
        try assertRoundTrip(LoginCallbackResult(account: "w", accepted: true))
        try assertRoundTrip(DiagnoseResult(agentVersion: "1", keyring: "available",
                                           browser: .init(program: "/usr/bin/firefox", source: "BROWSER", problem: nil, display: ":0",
                                                          waylandDisplay: "wayland-0", displaySource: "agent"), accounts: [
            .init(name: "w", issuer: "https://i", endpointsConfigured: false, authorizationEndpoint: "https://i/a", tokenEndpoint: "https://i/t",
                  revocationEndpoint: nil, jwksURI: "https://i/k", error: .init(code: "c", message: "m"), signingKeys: 2,
                  signingKeysError: nil, serverTime: 1, agentTime: 2),
            .init(name: "v", issuer: "https://j", endpointsConfigured: true),
        ]))
        var caller = WireCaller(pid: Int32.max, via: "socket", kind: .unidentified, exe: "/usr/bin/git", exeDeleted: true,
                                unit: "u.service", relayedBy: ["/usr/bin/dash", "/usr/bin/authctl"])
        (caller.flatpakApp, caller.flatpakInstance, caller.notContained) = ("org.x.App", "7", ["socket=session-bus"])
        (caller.unidentified, caller.host, caller.hostKey, caller.remoteProgram) = ("why", "h", "SHA256:k", "/usr/bin/git")
        caller.hostAlias = "build-box"
        try assertRoundTrip(AuditResult(entries: [
            AuditEntry(time: 1, account: "w", outcome: AuditEntry.granted, reason: "open", scopes: ["a"], resource: "https://r",
                       caller: caller, clipped: true),
            AuditEntry(time: 2, account: "w", outcome: AuditEntry.denied, reason: "not_listed", caller: WireCaller(pid: 1, via: "dbus", exe: nil)),
        ], capacity: 1000, next: 77))
        try assertRoundTrip(PendingResult(requests: [PendingConsent(id: 3, account: "w", client: "flatpak:org.x.App", caller: caller,
                                                                    since: 1_800_000_000, expiresIn: 55)]))
        try assertRoundTrip(ConsentResult(id: 3, account: "w", client: "/usr/bin/git", allowed: false))
        try assertRoundTrip(ForgetResult(forgotten: [.init(account: "w", client: "/usr/bin/git", allowed: true)]))
        try assertRoundTrip(ReloadResult(path: "/c.toml", accounts: ["w", "v"], added: ["v"], removed: [], changed: ["w"], needsRestart: ["socket"]))
        try assertRoundTrip(NoResult())
    }

    func testEventsAndErrorsRoundTrip() throws {
        for event in [WireEvent(type: WireEvent.loginStarted) {
                          $0.url = "https://i/a?x=1"; $0.redirectURI = "http://127.0.0.1:5/cb"; $0.browserOpened = false
                          $0.browserError = "no display"; $0.timeoutSeconds = 300
                      },
                      WireEvent(type: WireEvent.deviceCode) {
                          $0.url = nil; $0.userCode = "ABCD-EFGH"; $0.verificationURI = "https://i/d"
                          $0.verificationURIComplete = "https://i/d?c=1"; $0.expiresIn = 600; $0.interval = 5
                      },
                      WireEvent(type: WireEvent.consentRequired) { $0.timeoutSeconds = 60; $0.request = 3; $0.client = "/usr/bin/git" }] {
            var seen: [WireEvent] = []
            let line = try MiniJSONEncoder.encode(WireResponse<NoResult>(id: 1, event: event))
            XCTAssertEqual(String(decoding: line, as: UTF8.self), try Self.foundation(WireResponse<NoResult>(id: 1, event: event)))
            XCTAssertNil(try ReplyReader.read(line, as: PingResult.self, request: 1) { seen.append($0) })
            XCTAssertEqual(seen, [event])
        }
        for error in [WireError(.loginRateLimited, "wait", retryAfter: 30), WireError(.keyringLocked, "unlock it")] {
            let line = try MiniJSONEncoder.encode(WireResponse<NoResult>(id: 1, error: error))
            XCTAssertEqual(String(decoding: line, as: UTF8.self), try Self.foundation(WireResponse<NoResult>(id: 1, error: error)))
            XCTAssertThrowsError(try ReplyReader.read(line, as: PingResult.self, request: 1) { _ in }) { thrown in
                XCTAssertEqual(thrown as? ClientError, .agent(error))
            }
        }
    }

    func testTypesAndRangesAreChecked() throws {
        func decode<T: Decodable>(_ type: T.Type, _ text: String) throws -> T {
            try MiniJSONDecoder.decode(type, from: XCTUnwrap(MiniJSON.parse(Array(text.utf8)), text))
        }
        XCTAssertEqual(try decode([Int32].self, "[-2147483648,2147483647]"), [Int32.min, .max])
        XCTAssertThrowsError(try decode(Int32.self, "2147483648"))
        XCTAssertThrowsError(try decode(UInt8.self, "-1"))
        XCTAssertThrowsError(try decode(Double.self, "1"), "the protocol has no fractional numbers")
        XCTAssertThrowsError(try decode(Int.self, "true"))
        XCTAssertThrowsError(try decode(Bool.self, "1"))
        XCTAssertThrowsError(try decode(String.self, "null"))
        XCTAssertThrowsError(try decode([String].self, #"["a",1]"#))
        XCTAssertEqual(try decode(Operation.self, #""login_callback""#), .loginCallback)
        XCTAssertThrowsError(try decode(Operation.self, #""frobnicate""#))
        XCTAssertEqual(try decode([String: [Int?]].self, #"{"a":[1,null],"b":[]}"#), ["a": [1, nil], "b": []])
        let error = try decode(WireError.self, #"{"code":"c","message":"m","retry_after":null,"extra":[{}]}"#)
        XCTAssertEqual([error.code, error.message], ["c", "m"])
        XCTAssertNil(error.retryAfter)
        XCTAssertThrowsError(try decode(WireError.self, #"{"code":"c"}"#), "a required member missing")
    }

    /// A decoding error names the path and the type it wanted, never the value it found.
    func testErrorsDoNotRepeatValues() throws {
        let canary = "CANARY-\(UUID().uuidString)"
        let text = #"{"account":"w","access_token":"\#(canary)","token_type":"\#(canary)","expires_in":"\#(canary)","expires_at":1}"#
        XCTAssertThrowsError(try MiniJSONDecoder.decode(TokenResult.self, from: XCTUnwrap(MiniJSON.parse(Array(text.utf8))))) { error in
            XCTAssertFalse(String(describing: error).contains(canary))
            XCTAssertTrue(String(describing: error).contains("expires_in"), "\(error)")
        }
    }

    /// The strict reader takes an object of up to ``MiniJSON/maxMembers`` members and refuses a larger one, which
    /// bounds its duplicate-key check (a line of thousands of distinct keys is read on the agent's accept loop).
    func testObjectsHaveAMemberCap() throws {
        func object(_ count: Int) -> [UInt8] {
            Array(("{" + (0..<count).map { "\"k\($0)\":\($0)" }.joined(separator: ",") + "}").utf8)
        }
        let largest = try XCTUnwrap(MiniJSON.parse(object(MiniJSON.maxMembers)))
        XCTAssertEqual(largest["k\(MiniJSON.maxMembers - 1)"], .integer(MiniJSON.maxMembers - 1))
        XCTAssertNil(MiniJSON.parse(object(MiniJSON.maxMembers + 1)))
        guard case .invalid(nil, let error) = WireRequest.decode(line: Array(#"{"v":1,"id":1,"op":"ping","#.utf8)
                                                                      + object(9_000).dropFirst()) else {
            return XCTFail("a request line of 9,000 members is read")
        }
        XCTAssertEqual(error.code, "bad_request")
    }
}
