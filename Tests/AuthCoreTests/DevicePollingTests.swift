@testable import AuthCore
import AuthTestSupport
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
        XCTAssertEqual(DevicePolling.classify(HTTPReply(status: 503, body: [])), .transient(TokenResponseParser.error(from: HTTPReply(status: 503, body: []))))
        XCTAssertEqual(transient(DevicePolling.classify(reply(429, "slow_down"))), .serverError, "429 is a transient failure")
        XCTAssertEqual(transient(DevicePolling.classify(reply(502, "authorization_pending"))), .serverError,
                       "a 5xx is transient whatever its body says")
        // A 4xx without an OAuth error refuses the grant (TokenResponseParser): here, this sign-in.
        XCTAssertEqual(code(DevicePolling.classify(HTTPReply(status: 400, body: Array("not json".utf8)))), .loginFailed)
    }

    private func code(_ reply: DevicePolling.Reply) -> AuthError.Code? {
        if case .failed(let error) = reply { return error.code }
        return nil
    }

    private func transient(_ reply: DevicePolling.Reply) -> AuthError.Code? {
        if case .transient(let error) = reply { return error.code }
        return nil
    }

    func testTransientFailuresBackOffExponentiallyAndResetOnAnOAuthAnswer() {
        var machine = DevicePolling(interval: 5, expiresIn: 3600, startedAt: t0)
        let outage = AuthError(.serverError, "the authorization server is unavailable (HTTP 503)")
        var now = t0 + .seconds(5)
        var waits: [Duration] = []
        for _ in 0..<5 {
            guard case .poll(let wait) = machine.next(after: .transient(outage), now: now) else { return XCTFail("stopped on a 503") }
            waits.append(wait)
            now += wait
        }
        XCTAssertEqual(waits, [.seconds(10), .seconds(20), .seconds(40), .seconds(60), .seconds(60)], "doubles, capped at 60 s")
        XCTAssertEqual(machine.next(after: .pending, now: now), .poll(after: .seconds(5)), "an OAuth answer ends the backoff")
        XCTAssertEqual(machine.transientFailures, 0)
        XCTAssertEqual(machine.next(after: .transient(outage), now: now + .seconds(5)), .poll(after: .seconds(10)))
    }

    func testBackoffHonoursRetryAfterAndALongInterval() {
        var machine = DevicePolling(interval: 1, expiresIn: 3600, startedAt: t0)
        let limited = AuthError(.serverError, "the authorization server is unavailable (HTTP 429)", retryAfter: 30)
        XCTAssertEqual(machine.next(after: .transient(limited), now: t0 + .seconds(1)), .poll(after: .seconds(30)))
        var slow = DevicePolling(interval: 90, expiresIn: 3600, startedAt: t0)
        let down = AuthError(.serverUnreachable, "cannot reach the token endpoint")
        XCTAssertEqual(slow.next(after: .transient(down), now: t0 + .seconds(90)), .poll(after: .seconds(90)),
                       "never sooner than interval, even above the 60 s cap")
        var zero = DevicePolling(interval: 0, expiresIn: 3600, startedAt: t0)
        XCTAssertEqual(zero.next(after: .transient(down), now: t0), .poll(after: .seconds(2)), "a zero interval still backs off")
    }

    func testTransientFailureNeverWaitsPastExpiry() {
        var machine = DevicePolling(interval: 5, expiresIn: 12, startedAt: t0)
        let outage = AuthError(.serverError, "the authorization server is unavailable (HTTP 503)")
        guard case .stop(let error) = machine.next(after: .transient(outage), now: t0 + .seconds(5)) else {
            return XCTFail("would poll at t0+15 s, past expires_in (12 s)")
        }
        XCTAssertEqual(error.code, .serverError, "says why the sign-in could not finish")
        XCTAssertTrue(error.message.contains("expires before the next try"), error.message)
    }

    /// A refused connection is retried; a TLS failure is not (it will not fix itself, and must not be hidden).
    func testRunRetriesUnreachableServersButNotTLSFailures() async throws {
        let clock = ManualClock()
        var waits: [Duration] = []
        var attempts = 0
        let result: String = try await DevicePolling.run(
            DevicePolling(interval: 1, expiresIn: 600, startedAt: clock.now()), now: { clock.now() },
            sleep: { waits.append($0); clock.advance($0) },
            request: { () async throws(AuthError) -> DevicePolling.Attempt<String> in
                attempts += 1
                switch attempts {
                case 1, 2: throw AuthError(.serverUnreachable, "connection refused")
                case 3: return .notYet(HTTPReply(status: 503, body: []))
                case 4: return .notYet(FakeHTTP.errorReply(400, "authorization_pending"))
                default: return .tokens("tokens")
                }
            })
        XCTAssertEqual(result, "tokens")
        XCTAssertEqual(waits, [.seconds(1), .seconds(2), .seconds(4), .seconds(8), .seconds(1)])

        var tlsAttempts = 0
        do {
            let _: String = try await DevicePolling.run(
                DevicePolling(interval: 1, expiresIn: 600, startedAt: clock.now()), now: { clock.now() },
                sleep: { clock.advance($0) },
                request: { () async throws(AuthError) -> DevicePolling.Attempt<String> in
                    tlsAttempts += 1
                    throw AuthError(.tlsError, "certificate not trusted")
                })
            XCTFail("a TLS failure did not stop the polling")
        } catch {
            XCTAssertEqual((error as? AuthError)?.code, .tlsError)
            XCTAssertEqual(tlsAttempts, 1)
        }
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
