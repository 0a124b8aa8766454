@testable import AgentIPC
import Foundation
import XCTest

final class WireTests: XCTestCase {
    func testRequestEncodingUsesSnakeCaseAndVersion() throws {
        let data = try JSONEncoder().encode(WireRequest(op: .token, id: 3) { $0.account = "work"; $0.minValid = 60; $0.forceRefresh = true })
        let object = try XCTUnwrap(JSONSerialization.jsonObject(with: data) as? [String: Any])
        XCTAssertEqual(object["v"] as? Int, 1)
        XCTAssertEqual(object["op"] as? String, "token")
        XCTAssertEqual(object["min_valid"] as? Int, 60)
        XCTAssertEqual(object["force_refresh"] as? Bool, true)
        XCTAssertNil(object["interactive"], "absent options are omitted")
    }

    func testResponsesDecodeAsDocumented() throws {
        let token = #"{"v":1,"id":7,"result":{"account":"work","access_token":"AT","token_type":"Bearer","expires_in":59,"expires_at":1800000059,"scopes":["openid"]}}"#
        let decoded = try JSONDecoder().decode(WireResponse<TokenResult>.self, from: Data(token.utf8))
        XCTAssertEqual(decoded.id, 7)
        XCTAssertEqual(decoded.result?.accessToken, "AT")
        XCTAssertEqual(decoded.result?.expiresIn, 59)
        let error = #"{"v":1,"id":2,"error":{"code":"login_required","message":"run authctl login work"}}"#
        let decodedError = try JSONDecoder().decode(WireResponse<NoResult>.self, from: Data(error.utf8))
        XCTAssertEqual(decodedError.error?.knownCode, .loginRequired)
        let future = #"{"v":1,"error":{"code":"brand_new_code","message":"x"}}"#
        XCTAssertNil(try JSONDecoder().decode(WireResponse<NoResult>.self, from: Data(future.utf8)).error?.knownCode,
                     "an unknown code from a newer agent still decodes")
    }

    func testUnknownSignInStateIsAnExplicitNull() throws {
        let account = StatusResult.Account(name: "a", issuer: "https://x", clientID: "c", redirectURI: "http://127.0.0.1/cb",
                                           scopes: [], signedIn: nil, accessTokenExpiresAt: nil, accessTokenExpiresIn: nil,
                                           lastRefresh: nil, lastError: nil, loginPending: false)
        let text = String(decoding: try JSONEncoder().encode(account), as: UTF8.self)
        XCTAssertTrue(text.contains(#""signed_in":null"#), text)
        XCTAssertFalse(text.contains("last_error"), "other absent fields are omitted")
        let logout = String(decoding: try JSONEncoder().encode(LogoutResult(account: "a", hadRefreshToken: false, revoked: nil, revocationError: nil)), as: UTF8.self)
        XCTAssertTrue(logout.contains(#""revoked":null"#), logout)
    }

    func testSocketPathResolution() {
        XCTAssertEqual(SocketPath.resolve(environment: ["AUTH_AGENT_SOCKET": "/x.sock", "XDG_RUNTIME_DIR": "/run/user/1"]), "/x.sock")
        XCTAssertEqual(SocketPath.resolve(environment: ["XDG_RUNTIME_DIR": "/run/user/1/"]), "/run/user/1/auth-agent/agent.sock")
        XCTAssertNil(SocketPath.resolve(environment: [:]))
    }

    func testClientReportsAgentNotRunning() {
        XCTAssertThrowsError(try AgentClient(path: "/nonexistent-\(UUID().uuidString)/agent.sock")) { error in
            guard case ClientError.agentNotRunning = error else { return XCTFail("\(error)") }
        }
    }

    func testErrorCodesAreUniqueSnakeCase() {
        let codes = ErrorCode.allCases.map(\.rawValue)
        XCTAssertEqual(Set(codes).count, codes.count)
        for code in codes { XCTAssertTrue(code.allSatisfy { $0.isLowercase || $0 == "_" }, code) }
    }
}

final class AccessWireTests: XCTestCase {
    func testAccessRequestsAndResultsUseTheDocumentedNames() throws {
        let approve = try JSONEncoder().encode(WireRequest(op: .approve) { $0.request = 3 })
        let object = try XCTUnwrap(JSONSerialization.jsonObject(with: approve) as? [String: Any])
        XCTAssertEqual(object["op"] as? String, "approve")
        XCTAssertEqual(object["request"] as? Int, 3)
        let forget = try JSONDecoder().decode(WireRequest.self, from: Data(#"{"v":1,"op":"forget","account":"work","client":"/usr/bin/git"}"#.utf8))
        XCTAssertEqual(forget.client, "/usr/bin/git")
        let audit = #"{"v":1,"id":1,"result":{"capacity":1000,"entries":[{"time":1800000000,"account":"work","outcome":"denied","reason":"not_listed","caller":{"pid":42,"via":"dbus","kind":"flatpak","exe":"/usr/bin/curl","exe_deleted":true,"unit":"x.service","flatpak_app":"org.example.App"}}]}}"#
        let entry = try XCTUnwrap(try JSONDecoder().decode(WireResponse<AuditResult>.self, from: Data(audit.utf8)).result?.entries.first)
        var expected = WireCaller(pid: 42, via: "dbus", kind: .flatpak, exe: "/usr/bin/curl", exeDeleted: true, unit: "x.service")
        expected.flatpakApp = "org.example.App"
        XCTAssertEqual(entry.caller, expected)
        let event = try JSONEncoder().encode(WireEvent(type: WireEvent.consentRequired) { $0.timeoutSeconds = 60; $0.request = 3; $0.client = "/usr/bin/git" })
        XCTAssertEqual(String(decoding: event, as: UTF8.self).contains(#""type":"consent_required""#), true)
    }

    /// Issue 54, item 2: a host is named by the alias the person typed (`forward`'s `alias`, the caller's
    /// `host_alias`), with ssh's key name beside it.
    func testAForwardCarriesTheAliasTypedAndTheHostIsDescribedByIt() throws {
        let forward = try JSONEncoder().encode(WireRequest(op: .forward) { $0.host = "127.0.0.1:22022"; $0.alias = "build-box" })
        let object = try XCTUnwrap(JSONSerialization.jsonObject(with: forward) as? [String: Any])
        XCTAssertEqual(object["alias"] as? String, "build-box")
        XCTAssertEqual(try JSONDecoder().decode(WireRequest.self, from: forward).alias, "build-box")
        var host = WireCaller(pid: 7, via: "ssh:build-box", kind: .sshHost, exe: "/usr/bin/ssh")
        (host.host, host.hostAlias, host.hostKey) = ("127.0.0.1:22022", "build-box", "SHA256:k")
        XCTAssertEqual(host.described(), "host build-box (127.0.0.1:22022) over ssh (host key SHA256:k)")
        host.hostAlias = nil
        XCTAssertEqual(host.described(), "host 127.0.0.1:22022 over ssh (host key SHA256:k)")
        let encoded = try XCTUnwrap(JSONSerialization.jsonObject(with: JSONEncoder().encode(StatusResult.Forward(
            host: "127.0.0.1:22022", alias: "build-box", hostKey: nil, sshPID: nil, since: 1))) as? [String: Any])
        XCTAssertEqual(encoded["alias"] as? String, "build-box")
    }

    func testAuditPagesUseTheDocumentedNamesAndJoinOldestFirst() throws {
        let request = try JSONEncoder().encode(WireRequest(op: .audit) { $0.since = 5; $0.before = 1200 })
        let object = try XCTUnwrap(JSONSerialization.jsonObject(with: request) as? [String: Any])
        XCTAssertEqual(object["before"] as? Int, 1200)
        let caller = WireCaller(pid: 1, via: "socket", exe: "/usr/bin/git")
        let page = { (times: [Int], next: Int?) in
            AuditResult(entries: times.map { AuditEntry(time: $0, account: "work", outcome: "granted", reason: "open", caller: caller) },
                        capacity: 1000, next: next)
        }
        let line = #"{"capacity":1000,"entries":[],"next":17}"#
        XCTAssertEqual(try JSONDecoder().decode(AuditResult.self, from: Data(line.utf8)).next, 17)
        let joined = AuditResult.joined([page([5, 6], 4), page([3, 4], 2), page([1, 2], nil)])
        XCTAssertEqual(joined.entries.map(\.time), [1, 2, 3, 4, 5, 6])
        XCTAssertNil(joined.next)
    }
}
