@testable import AuthCore
import AuthTestSupport
import Foundation
import XCTest

/// One account's refresh rules (``RefreshMachine``), step by step on the manual clock, with no broker, task or I/O:
/// each request's action and what each outcome leaves. The default policy: tokens of 600 s are refreshed 60 s before
/// they expire (plus up to a fifth of that with jitter), and never handed out with less than 10 s left.
final class RefreshMachineTests: XCTestCase {
    let clock = ManualClock()
    let policy = RefreshPolicy()

    private func token(lifetime: Duration = .seconds(600), jitter: Double = 0) -> CachedToken {
        CachedToken(tokens: TokenSet(accessToken: Secret("at"), lifetime: lifetime, receivedAt: clock.now()), jitter: jitter)
    }

    private func request(_ machine: RefreshMachine, _ cached: CachedToken?, refreshing: Bool = false,
                         minValid: Duration = .zero, force: Bool = false) -> RefreshMachine.Action {
        machine.request(cached: cached, refreshing: refreshing, now: clock.now(), minValid: minValid, forceRefresh: force)
    }

    private let outage = AuthError(.serverUnreachable, "connection refused")

    func testAFreshTokenIsServedAndItsRefreshStartsBehindItOnceInsideTheMargin() {
        let machine = RefreshMachine(policy: policy)
        let cached = token()
        XCTAssertEqual(request(machine, nil), .start, "nothing cached: the first caller starts the refresh")
        XCTAssertEqual(request(machine, nil, refreshing: true), .join, "later callers join it")
        XCTAssertEqual(request(machine, cached), .serve(refreshBehind: false))

        clock.advance(.seconds(539))
        XCTAssertEqual(request(machine, cached), .serve(refreshBehind: false), "61 s left: outside the 60 s margin")
        clock.advance(.seconds(1))
        XCTAssertEqual(request(machine, cached), .serve(refreshBehind: true), "inside the margin: served, refreshed behind")
        XCTAssertEqual(request(machine, cached, refreshing: true), .serve(refreshBehind: false),
                       "one refresh behind it, not one per caller")
        XCTAssertEqual(machine.refreshMoment(cached), cached.tokens.receivedAt + .seconds(540))

        clock.advance(.seconds(51))
        XCTAssertEqual(request(machine, cached), .start, "9 s left is under the 10 s minimum: not served")
    }

    func testJitterMovesTheRefreshMomentEarlierByUpToAFifthOfTheMargin() {
        let machine = RefreshMachine(policy: policy)
        XCTAssertEqual(machine.refreshMoment(token(jitter: 1)), clock.now() + .seconds(528))
        XCTAssertEqual(machine.refreshMoment(token(jitter: 0.5)), clock.now() + .seconds(534))
    }

    func testMinValidAndForceRefreshAndStaleTokensGoToTheServer() {
        let machine = RefreshMachine(policy: policy)
        var cached = token()
        XCTAssertEqual(request(machine, cached, minValid: .seconds(500)), .serve(refreshBehind: false))
        XCTAssertEqual(request(machine, cached, minValid: .seconds(601)), .serve(refreshBehind: false),
                       "more than a fresh token could give is capped at what one has at its refresh moment")
        clock.advance(.seconds(100))
        XCTAssertEqual(request(machine, cached, minValid: .seconds(550)), .start, "500 s left, 540 attainable")
        XCTAssertEqual(request(machine, cached, force: true), .start)
        XCTAssertEqual(request(machine, cached, refreshing: true, force: true), .join, "forcing joins a running refresh")
        cached.stale = true
        XCTAssertEqual(request(machine, cached), .start, "a stale token (after a resume) is not served")
    }

    func testTransientFailuresBackOffExponentiallyAndACachedTokenIsServedMeanwhile() {
        var machine = RefreshMachine(policy: policy)
        let cached = token()
        clock.advance(.seconds(545))

        let first = machine.failed(outage, entry: .default, now: clock.now(), wallClock: clock.wallClock(), jitter: 0.5)
        XCTAssertEqual(first, .seconds(2), "base 2 s, jitter 0.5 keeps it")
        XCTAssertEqual(machine.state, .failing(count: 1, retryNotBefore: clock.now() + .seconds(2),
                                               callersNotBefore: clock.now() + .seconds(1), entry: .default))
        XCTAssertEqual(machine.lastError?.code, .serverUnreachable)
        XCTAssertEqual(request(machine, cached), .serve(refreshBehind: false),
                       "inside the margin, failed moments ago: served without a refresh behind it")
        XCTAssertEqual(request(machine, nil), .waitOut(retryAfter: .seconds(1)))
        XCTAssertEqual(request(machine, nil, force: true), .start, "forcing asks the server anyway")

        clock.advance(.seconds(1))
        XCTAssertEqual(request(machine, nil), .start, "a second later a caller asks the server again")
        XCTAssertEqual(request(machine, cached), .serve(refreshBehind: true), "and so does a refresh behind a served token")
        clock.advance(.seconds(1))
        let second = machine.failed(outage, entry: .default, now: clock.now(), wallClock: clock.wallClock(), jitter: 0.5)
        XCTAssertEqual(second, .seconds(4))
        XCTAssertEqual(machine.failures, 2)

        var staleCached = cached
        staleCached.stale = true
        XCTAssertEqual(request(machine, staleCached), .serveDuringBackoff,
                       "not servable (stale) but still valid: while callers may not ask, it beats an error")
        clock.advance(.seconds(1))
        XCTAssertEqual(request(machine, staleCached), .start,
                       "once callers may ask, the server is asked (a transient failure still serves it: recover)")

        machine.clearFailures()
        XCTAssertEqual(machine.state, .healthy)
        XCTAssertNil(machine.lastError)
        XCTAssertEqual(request(machine, nil), .start)
    }

    /// Issue 47: faults in a row grow the backoff (2, 4, 8, 16 s...), but a caller who needs a token never waits it
    /// out: the server is asked again a second after each failure while callers ask, and the proactive loop, with
    /// nobody waiting, keeps the exponential backoff.
    func testCallersAskTheServerEverySecondWhileTheProactiveLoopBacksOff() {
        var machine = RefreshMachine(policy: policy)
        let cached = token()
        let used = clock.now()
        clock.advance(.seconds(545))
        for failure in 1...6 {
            let delay = machine.failed(outage, entry: .default, now: clock.now(), wallClock: clock.wallClock(), jitter: 0.5)
            XCTAssertEqual(delay, .seconds(2 << (failure - 1)), "the backoff still doubles")
            XCTAssertEqual(request(machine, nil), .waitOut(retryAfter: .seconds(1)),
                           "a caller is told the truth: the next attempt a request makes is a second away")
            clock.advance(.milliseconds(999))
            XCTAssertEqual(request(machine, nil), .waitOut(retryAfter: .milliseconds(1)))
            clock.advance(.milliseconds(1))
            XCTAssertEqual(request(machine, nil), .start, "failure \(failure): callers ask again after 1 s")
            XCTAssertEqual(request(machine, nil, refreshing: true), .join, "one request at a time, however many ask")
            XCTAssertFalse(machine.isDue(cached, refreshing: false, lastUse: used, now: clock.now()),
                           "the proactive loop waits out the backoff")
        }
        XCTAssertEqual(machine.nextCheck(cached), clock.now() - .seconds(1) + .seconds(64),
                       "the proactive loop looks again when the sixth backoff (64 s) ends")
    }

    func testAServersRetryAfterIsNeverCutShort() {
        var machine = RefreshMachine(policy: policy)
        let busy = AuthError(.serverError, "HTTP 503", retryAfter: 120)
        XCTAssertEqual(machine.failed(busy, entry: .default, now: clock.now(), wallClock: clock.wallClock(), jitter: 0),
                       .seconds(120))
        XCTAssertEqual(request(machine, nil), .waitOut(retryAfter: .seconds(120)), "not by callers either")
        clock.advance(.seconds(119))
        XCTAssertEqual(request(machine, nil), .waitOut(retryAfter: .seconds(1)))
        clock.advance(.seconds(1))
        XCTAssertEqual(request(machine, nil), .start)
    }

    func testAFailureThatIsNotTransientNeedsAttentionAndSetsNoBackoff() {
        var machine = RefreshMachine(policy: policy)
        let cached = token()
        var jitterAsked = false
        let delay = machine.failed(AuthError(.invalidClient, "invalid_client"), entry: .default, now: clock.now(),
                                   wallClock: clock.wallClock(), jitter: { jitterAsked = true; return 0 }())
        XCTAssertNil(delay)
        XCTAssertFalse(jitterAsked, "no backoff, so no random draw")
        XCTAssertEqual(machine.state, .healthy)
        XCTAssertTrue(machine.needsAttention)
        XCTAssertEqual(request(machine, nil), .start, "a caller's request still tries")
        clock.advance(.seconds(545))
        XCTAssertFalse(machine.isDue(cached, refreshing: false, lastUse: clock.now(), now: clock.now()),
                       "the proactive loop does not repeat it")
        XCTAssertFalse(machine.isInUse(lastUse: clock.now(), now: clock.now()))
    }

    func testWhatACallerDoesAfterItsRefreshFailed() {
        let machine = RefreshMachine(policy: policy)
        let cached = token()
        let now = clock.now()
        let login = AuthError.loginRequired("work")
        XCTAssertEqual(machine.recover(from: login, cached: cached, now: now, forceRefresh: false), .fail,
                       "a refused refresh token is never papered over with the cached token")
        XCTAssertEqual(machine.recover(from: outage, cached: cached, now: now, forceRefresh: false),
                       .serveCached)
        XCTAssertEqual(machine.recover(from: outage, cached: cached, now: now, forceRefresh: true), .fail,
                       "a caller who forced a refresh wants the new token or the error")
        XCTAssertEqual(machine.recover(from: outage, cached: nil, now: now, forceRefresh: false), .fail)
        XCTAssertEqual(machine.recover(from: outage, cached: cached, now: now + .seconds(591), forceRefresh: false), .fail,
                       "9 s left: not even during an outage")
    }

    func testTheProactiveLoopRefreshesRecentlyUsedAccountsAtTheirMoment() {
        var machine = RefreshMachine(policy: policy)
        let cached = token()
        let used = clock.now()
        XCTAssertFalse(machine.isDue(cached, refreshing: false, lastUse: used, now: clock.now()))
        XCTAssertEqual(machine.nextCheck(cached), clock.now() + .seconds(540))
        clock.advance(.seconds(540))
        XCTAssertTrue(machine.isDue(cached, refreshing: false, lastUse: used, now: clock.now()))
        XCTAssertFalse(machine.isDue(cached, refreshing: true, lastUse: used, now: clock.now()), "already refreshing")
        XCTAssertFalse(machine.isDue(cached, refreshing: false, lastUse: nil, now: clock.now()), "never used")

        machine.failed(outage, entry: .default, now: clock.now(), wallClock: clock.wallClock(), jitter: 0.5)
        XCTAssertFalse(machine.isDue(cached, refreshing: false, lastUse: used, now: clock.now()), "backing off")
        XCTAssertEqual(machine.nextCheck(cached), clock.now() + .seconds(2), "looked at again when the backoff ends")
        machine.networkCameBack()
        XCTAssertEqual(machine.state, .failing(count: 1, retryNotBefore: nil, callersNotBefore: nil, entry: .default),
                       "the network is back: no wait, but the count stays for the next failure")
        XCTAssertTrue(machine.isDue(cached, refreshing: false, lastUse: used, now: clock.now()))

        clock.advance(policy.recentUse)
        XCTAssertFalse(machine.isDue(cached, refreshing: false, lastUse: used, now: clock.now()),
                       "not used within the window: left to expire")
    }

    func testSigningOutForgetsFailures() {
        var machine = RefreshMachine(policy: policy)
        machine.failed(outage, entry: .default, now: clock.now(), wallClock: clock.wallClock(), jitter: 0)
        machine.clearFailures()
        XCTAssertEqual(machine.state, .healthy)
        XCTAssertNil(machine.lastError)
        XCTAssertNil(machine.retryNotBefore)
    }
}
