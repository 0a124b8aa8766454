@testable import AuthCore
import XCTest

/// The pure rules of WakePlan, one at a time.
final class WakePlanTests: XCTestCase {
    let policy = RefreshPolicy()
    let t0 = ContinuousClock.now

    func account(_ name: String, lastUsed: Duration?, refreshAt: Duration, error: AuthError.Code? = nil,
                 retryNotBefore: Duration? = nil, failed: TokenCacheKey? = nil) -> WakePlan.Account {
        WakePlan.Account(name: name, lastUsed: lastUsed.map { t0 + $0 }, lastErrorCode: error,
                         retryNotBefore: retryNotBefore.map { t0 + $0 }, failedEntry: failed,
                         entries: [.init(key: .default, receivedAt: t0, refreshAt: t0 + refreshAt)])
    }

    func testResumeMarksEntriesInsideTheirMarginAndThoseOfAccountsInUse() {
        let now = t0 + .seconds(10_000)
        let plan = WakePlan.afterResume([
            account("idle-in-margin", lastUsed: nil, refreshAt: .seconds(9_000)),
            account("idle-fresh", lastUsed: nil, refreshAt: .seconds(20_000)),
            account("used-fresh", lastUsed: .seconds(5_000), refreshAt: .seconds(20_000)),
            account("used-long-ago", lastUsed: .seconds(100), refreshAt: .seconds(20_000)),
        ], suspendedAt: t0 + .seconds(6_000), now: now, policy: policy)
        XCTAssertEqual(plan.stale.map(\.account), ["idle-in-margin", "used-fresh"])
        XCTAssertEqual(plan.refreshNow.map(\.account), ["used-fresh"], "idle accounts refresh on their next request")
        XCTAssertEqual(plan.backoffEnded, [])
    }

    func testWithoutTheSuspendSignalRecentUseIsMeasuredAtTheResume() {
        let plan = WakePlan.afterResume([account("a", lastUsed: .seconds(5_000), refreshAt: .seconds(20_000))],
                                        suspendedAt: nil, now: t0 + .seconds(10_000), policy: policy)
        XCTAssertEqual(plan.stale, [], "used 5000 s before the resume: more than the 3600 s window")
    }

    func testResumeEndsNetworkBackoffButNotTheServers() {
        let now = t0 + .seconds(100)
        let plan = WakePlan.afterResume([
            account("net", lastUsed: .seconds(90), refreshAt: .seconds(50), error: .serverUnreachable, retryNotBefore: .seconds(200)),
            account("server", lastUsed: .seconds(90), refreshAt: .seconds(50), error: .serverError, retryNotBefore: .seconds(200)),
        ], suspendedAt: nil, now: now, policy: policy)
        XCTAssertEqual(plan.backoffEnded, ["net"])
        XCTAssertEqual(plan.stale.map(\.account), ["net", "server"])
        XCTAssertEqual(plan.refreshNow.map(\.account), ["net"], "the server asked us to wait: its token waits too")
    }

    func testNetworkUpRetriesOnlyNetworkFailuresOfAccountsInUse() {
        let now = t0 + .seconds(100)
        let scoped = TokenCacheKey(normalisedScopes: ["read"], resource: nil)
        let plan = WakePlan.afterNetworkUp([
            account("net", lastUsed: .seconds(90), refreshAt: .seconds(5_000), error: .serverUnreachable,
                    retryNotBefore: .seconds(200), failed: scoped),
            account("server", lastUsed: .seconds(90), refreshAt: .seconds(50), error: .serverError, retryNotBefore: .seconds(200)),
            account("over", lastUsed: .seconds(90), refreshAt: .seconds(50), error: .serverUnreachable, retryNotBefore: .seconds(50)),
            account("denied", lastUsed: .seconds(90), refreshAt: .seconds(50), error: .loginRequired),
        ], now: now, policy: policy)
        XCTAssertEqual(plan.backoffEnded, ["net"], "a backoff already over, a server's backoff, a sign-in: untouched")
        XCTAssertEqual(plan.refreshNow, [TokenEntry(account: "net", key: scoped)], "the refresh that failed is the one retried")
        XCTAssertEqual(plan.stale, [], "the network coming back makes no token stale")
    }

    func testOnlyServerUnreachableIsANetworkFailure() {
        XCTAssertTrue(RefreshPolicy.isNetworkFailure(.serverUnreachable))
        for code: AuthError.Code in [.serverError, .tlsError, .invalidTokenResponse, .keyringError, .loginRequired] {
            XCTAssertFalse(RefreshPolicy.isNetworkFailure(code), "\(code)")
        }
    }
}
