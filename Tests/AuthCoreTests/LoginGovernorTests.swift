@testable import AuthCore
import AuthTestSupport
import Foundation
import XCTest

/// The login governor: background token requests never start a sign-in, and repeated failed sign-ins are
/// rate-limited (on the manual clock).
final class LoginGovernorTests: XCTestCase {
    func testBackgroundTokenRequestNeverOpensABrowser() async throws {
        let browser = FakeBrowser()
        let redirects = FakeRedirects()
        let broker = Fixtures.broker(redirects: redirects, browser: browser)
        await assertThrows(.loginRequired) { _ = try await broker.accessToken(account: "work") }
        await assertThrows(.loginRequired) { _ = try await broker.accessToken(account: "work", forceRefresh: true) }
        XCTAssertEqual(browser.opened.count, 0, "a non-interactive request opened a browser")
        XCTAssertEqual(redirects.opened, 0, "a non-interactive request opened a redirect listener")
        let status = await broker.status()
        XCTAssertFalse(status.accounts[0].loginPending)
    }

    func testPolicyAllowsThreeQuickFailuresThenDoublesThePause() {
        let limit = LoginRateLimit()
        let t0 = ContinuousClock.now
        let s = { (n: Int) in t0 + .seconds(n) }
        XCTAssertNil(limit.wait(failures: [], now: t0))
        XCTAssertNil(limit.wait(failures: [s(0), s(10)], now: s(11)), "two failures cost nothing")
        XCTAssertEqual(limit.wait(failures: [s(0), s(10), s(20)], now: s(21)), .seconds(59), "the third: 60 s pause")
        XCTAssertNil(limit.wait(failures: [s(0), s(10), s(20)], now: s(80)))
        XCTAssertEqual(limit.wait(failures: [s(0), s(10), s(20), s(80)], now: s(80)), .seconds(120), "the fourth: 2 min")
        let many = (0..<10).map { s($0 * 10) }
        XCTAssertEqual(limit.wait(failures: many, now: s(90)), .seconds(900), "capped at 15 min")
        XCTAssertNil(limit.wait(failures: [s(0), s(10), s(20)], now: s(20 + 900)), "old failures age out of the window")
    }

    func testOnlyOutcomesAtTheServerCount() {
        XCTAssertTrue(LoginRateLimit.counts(.accessDenied))
        XCTAssertTrue(LoginRateLimit.counts(.loginTimeout))
        XCTAssertTrue(LoginRateLimit.counts(.invalidIDToken))
        XCTAssertFalse(LoginRateLimit.counts(.loginCancelled), "Ctrl-C is not a failure")
        XCTAssertFalse(LoginRateLimit.counts(.keyringLocked))
        XCTAssertFalse(LoginRateLimit.counts(.loginRateLimited))
    }

    func testRepeatedDenialsAreRateLimitedAndASuccessClearsThem() async throws {
        let clock = ManualClock()
        let redirects = FakeRedirects()
        let browser = FakeBrowser()
        let http = FakeHTTP()
        let broker = Fixtures.broker(accounts: [Fixtures.account(scopes: [])], http: http, redirects: redirects,
                                     browser: browser, clock: clock)
        func deny() async throws {
            let ticket = try await broker.beginLogin(account: "work")
            let state = try XCTUnwrap(browser.lastQuery["state"]?.first)
            _ = redirects.deliver("error=access_denied&state=\(state)")
            await assertThrows(.accessDenied) { _ = try await broker.awaitLogin(ticket) }
        }
        for _ in 0..<3 {
            try await deny()
            clock.advance(.seconds(5))
        }
        do {
            _ = try await broker.beginLogin(account: "work")
            XCTFail("a fourth sign-in right after three denials was not limited")
        } catch {
            XCTAssertEqual(error.code, .loginRateLimited)
            XCTAssertEqual(error.retryAfter, 55)
        }
        XCTAssertEqual(browser.opened.count, 3, "a refused sign-in opens no browser")

        clock.advance(.seconds(56))
        let ticket = try await broker.beginLogin(account: "work")
        let state = try XCTUnwrap(browser.lastQuery["state"]?.first)
        http.tokenReplies = [FakeHTTP.tokenReply(access: "at-1", refresh: "rt-1")]
        _ = redirects.deliver("code=c&state=\(state)")
        _ = try await broker.awaitLogin(ticket)
        try await deny()
        try await deny()
        _ = try await broker.beginLogin(account: "work")  // the success cleared the record: two new failures are free
    }
}
