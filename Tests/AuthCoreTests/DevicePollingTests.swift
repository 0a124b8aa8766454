@testable import AuthCore
import Foundation
import XCTest

/// RFC 8628 §3.4-3.5 polling rules, step by step on a manual clock: no test sleeps.
final class DevicePollingTests: XCTestCase {
    let t0 = ContinuousClock.now

    func testDefaultIntervalIsFiveSecondsAndPendingKeepsIt() {
        var machine = DevicePolling(interval: nil, expiresIn: 600, startedAt: t0)
        XCTAssertEqual(machine.start(now: t0), .poll(after: .seconds(5)))
        XCTAssertEqual(machine.next(after: .pending, now: t0 + .seconds(5)), .poll(after: .seconds(5)))
        XCTAssertEqual(machine.interval, .seconds(5))
    }

    func testSlowDownAddsFiveSecondsForAllLaterPolls() {
        var machine = DevicePolling(interval: 2, expiresIn: 600, startedAt: t0)
        XCTAssertEqual(machine.start(now: t0), .poll(after: .seconds(2)))
        XCTAssertEqual(machine.next(after: .slowDown, now: t0 + .seconds(2)), .poll(after: .seconds(7)))
        XCTAssertEqual(machine.next(after: .pending, now: t0 + .seconds(9)), .poll(after: .seconds(7)), "the increase stays")
        XCTAssertEqual(machine.next(after: .slowDown, now: t0 + .seconds(16)), .poll(after: .seconds(12)), "and accumulates")
    }

    func testNoPollAfterTheDeviceCodeExpires() {
        var machine = DevicePolling(interval: 5, expiresIn: 12, startedAt: t0)
        XCTAssertEqual(machine.start(now: t0), .poll(after: .seconds(5)))
        XCTAssertEqual(machine.next(after: .pending, now: t0 + .seconds(5)), .poll(after: .seconds(5)))
        guard case .stop(let error) = machine.next(after: .pending, now: t0 + .seconds(10)) else {
            return XCTFail("polled past expires_in")
        }
        XCTAssertEqual(error.code, .loginTimeout)
    }

    func testClassifiesEveryRFC8628Error() {
        func reply(_ status: Int, _ error: String) -> HTTPReply { FakeHTTP.errorReply(status, error) }
        XCTAssertEqual(DevicePolling.classify(reply(400, "authorization_pending")), .pending)
        XCTAssertEqual(DevicePolling.classify(reply(400, "slow_down")), .slowDown)
        XCTAssertEqual(code(DevicePolling.classify(reply(400, "expired_token"))), .loginTimeout)
        XCTAssertEqual(code(DevicePolling.classify(reply(400, "access_denied"))), .accessDenied)
        XCTAssertEqual(code(DevicePolling.classify(reply(400, "invalid_grant"))), .loginFailed)
        XCTAssertEqual(code(DevicePolling.classify(reply(401, "invalid_client"))), .invalidClient)
        XCTAssertEqual(code(DevicePolling.classify(reply(400, "unsupported_grant_type"))), .serverError)
        XCTAssertEqual(code(DevicePolling.classify(HTTPReply(status: 503, body: []))), .serverError)
        XCTAssertEqual(code(DevicePolling.classify(HTTPReply(status: 400, body: Array("not json".utf8)))), .serverError)
    }

    private func code(_ reply: DevicePolling.Reply) -> AuthError.Code? {
        if case .failed(let error) = reply { return error.code }
        return nil
    }

    /// The loop over an injected clock and sleeper: the waits it asks for are exactly the RFC's.
    func testRunWaitsTheIntervalsAndReturnsTheTokens() async throws {
        let clock = ManualClock()
        var waits: [Duration] = []
        var replies = [FakeHTTP.errorReply(400, "authorization_pending"), FakeHTTP.errorReply(400, "slow_down"),
                       FakeHTTP.errorReply(400, "authorization_pending"), FakeHTTP.errorReply(400, "slow_down")]
        let machine = DevicePolling(interval: 1, expiresIn: 600, startedAt: clock.now())
        let result: String = try await DevicePolling.run(
            machine, now: { clock.now() },
            sleep: { waits.append($0); clock.advance($0) },
            request: { () async throws(AuthError) -> DevicePolling.Attempt<String> in
                replies.isEmpty ? .tokens("tokens") : .notYet(replies.removeFirst())
            })
        XCTAssertEqual(result, "tokens")
        XCTAssertEqual(waits, [.seconds(1), .seconds(1), .seconds(6), .seconds(6), .seconds(11)])
    }

    func testRunStopsOnDeniedAndOnExpiry() async throws {
        for (reply, expected) in [("access_denied", AuthError.Code.accessDenied), ("expired_token", .loginTimeout)] {
            let clock = ManualClock()
            var requests = 0
            do {
                let _: String = try await DevicePolling.run(
                    DevicePolling(interval: 0, expiresIn: 60, startedAt: clock.now()), now: { clock.now() },
                    sleep: { clock.advance($0) },
                    request: { () async throws(AuthError) -> DevicePolling.Attempt<String> in
                        requests += 1
                        return .notYet(FakeHTTP.errorReply(400, requests < 3 ? "authorization_pending" : reply))
                    })
                XCTFail("\(reply) did not stop the polling")
            } catch {
                XCTAssertEqual((error as? AuthError)?.code, expected)
                XCTAssertEqual(requests, 3, "stops at once on \(reply)")
            }
        }
    }

    func testParsesTheDeviceAuthorizationResponse() throws {
        let body = #"{"device_code":"dc-1","user_code":"WDJB-MJHT","verification_uri":"https://issuer.example/device","#
            + #""verification_uri_complete":"https://issuer.example/device?user_code=WDJB-MJHT","expires_in":"1800","interval":5}"#
        let parsed = try DeviceAuthorization.parse(HTTPReply(status: 200, body: Array(body.utf8)))
        XCTAssertEqual(parsed.deviceCode.reveal(), "dc-1")
        XCTAssertEqual(parsed.userCode, "WDJB-MJHT")
        XCTAssertEqual(parsed.expiresIn, 1800)
        XCTAssertEqual(parsed.interval, 5)
        XCTAssertEqual(parsed.verificationURIComplete?.absoluteString, "https://issuer.example/device?user_code=WDJB-MJHT")
    }

    func testRefusesBadDeviceAuthorizationResponses() {
        let good: [String: Any] = ["device_code": "dc", "user_code": "ABCD", "verification_uri": "https://i.example/d",
                                   "expires_in": 600]
        var cases: [(String, [String: Any])] = []
        cases.append(("no device_code", good.filter { $0.key != "device_code" }))
        cases.append(("http verification uri", good.merging(["verification_uri": "http://i.example/d"]) { $1 }))
        cases.append(("javascript uri", good.merging(["verification_uri": "javascript:alert(1)"]) { $1 }))
        cases.append(("option-like uri", good.merging(["verification_uri_complete": "-oProxyCommand=x"]) { $1 }))
        cases.append(("user code with a newline", good.merging(["user_code": "AB\nCD"]) { $1 }))
        cases.append(("zero expires_in", good.merging(["expires_in": 0]) { $1 }))
        cases.append(("negative interval", good.merging(["interval": -1]) { $1 }))
        cases.append(("huge interval", good.merging(["interval": 100_000]) { $1 }))
        for (name, object) in cases {
            let reply = HTTPReply(status: 200, body: Array(try! JSONSerialization.data(withJSONObject: object)))
            XCTAssertThrowsError(try DeviceAuthorization.parse(reply), name) {
                XCTAssertEqual(($0 as? AuthError)?.code, .invalidTokenResponse, name)
            }
        }
        XCTAssertThrowsError(try DeviceAuthorization.parse(FakeHTTP.errorReply(401, "invalid_client"))) {
            XCTAssertEqual(($0 as? AuthError)?.code, .invalidClient)
        }
    }
}
