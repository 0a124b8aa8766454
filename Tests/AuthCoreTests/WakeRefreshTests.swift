import AuthTestSupport
@testable import AuthCore
import Foundation
import XCTest

/// Resume from suspend and network-up (TokenBroker+Wake.swift, WakePlan.swift), on a manual clock: a suspend is the
/// clock jumping (ContinuousClock counts suspended time), nothing sleeps.
final class WakeRefreshTests: XCTestCase {
    let work = Fixtures.account("work")
    let mail = Fixtures.account("mail")

    func broker(_ store: MemorySecretStore, _ http: FakeHTTP, _ clock: ManualClock,
                accounts: [AccountConfig]? = nil) -> TokenBroker {
        http.discovery["https://issuer.example/.well-known/openid-configuration"] = HTTPReply(status: 200, body: Fixtures.discoveryBody)
        return TokenBroker(accounts: accounts ?? [work], store: store, http: http, redirects: FakeRedirects(),
                           browser: FakeBrowser(), time: clock, random: { 0 }, logger: .init(label: "test"))
    }

    func testTokenThatExpiredDuringSuspendIsNeverServedEvenBeforeTheResumeSignal() async throws {
        let store = MemorySecretStore(items: [SecretKey(work): Secret("rt-1")])
        let http = FakeHTTP()
        let clock = ManualClock()
        http.tokenReplies = [FakeHTTP.tokenReply(access: "at-1", refresh: "rt-2", expiresIn: 600),
                             FakeHTTP.tokenReply(access: "at-2", refresh: "rt-3", expiresIn: 600)]
        let broker = broker(store, http, clock)
        _ = try await broker.accessToken(account: "work")
        await broker.systemSuspending()
        clock.advance(.seconds(700))
        // logind's resume signal has not arrived yet (or never will): expiry alone keeps at-1 from being served.
        let token = try await broker.accessToken(account: "work")
        XCTAssertEqual(token.accessToken.reveal(), "at-2")
        XCTAssertEqual(http.tokenPosts.count, 2)
        // The late resume signal finds nothing stale left: at-2 was issued after the suspend.
        let resumed = await broker.systemResumed()
        XCTAssertEqual(resumed, [], "the caller's refresh already replaced the token from before the suspend")
        XCTAssertEqual(http.tokenPosts.count, 2)
    }

    func testAfterResumeARequestWaitsForTheRefreshInsteadOfGettingTheStaleToken() async throws {
        let store = MemorySecretStore(items: [SecretKey(work): Secret("rt-1")])
        let http = FakeHTTP()
        let clock = ManualClock()
        http.tokenReplies = [FakeHTTP.tokenReply(access: "at-1", refresh: "rt-2", expiresIn: 3600),
                             FakeHTTP.tokenReply(access: "at-2", refresh: "rt-3", expiresIn: 3600)]
        let broker = broker(store, http, clock)
        _ = try await broker.accessToken(account: "work")
        await broker.systemSuspending()
        // 3300 s asleep: at-1 has 300 s left, inside its 360 s margin; the proactive timer slept through its moment.
        clock.advance(.seconds(3300))
        let gate = TokenGate()
        http.tokenGate = gate
        let resume = Task { await broker.systemResumed() }
        await gate.arrived(1)
        let stale = await broker.accounts["work"]?.cache?.stale
        XCTAssertEqual(stale, true, "at-1 is withdrawn while its refresh runs")
        let caller = Task { try await broker.accessToken(account: "work") }
        gate.open()
        let served = try await caller.value
        XCTAssertEqual(served.accessToken.reveal(), "at-2", "the caller waited for the refresh, it did not get at-1")
        let refreshed = await resume.value
        XCTAssertEqual(refreshed, [TokenEntry(account: "work", key: .default)])
        XCTAssertEqual(http.tokenPosts.count, 2, "the caller joined the resume's refresh (single flight)")
        let kept = await store.items[SecretKey(work)]
        XCTAssertEqual(kept?.reveal(), "rt-3", "the rotated refresh token was stored")
    }

    func testRecentUseIsMeasuredUpToTheSuspendNotAcrossIt() async throws {
        let store = MemorySecretStore(items: [SecretKey(work): Secret("rt-w"), SecretKey(mail): Secret("rt-m")])
        let http = FakeHTTP()
        let clock = ManualClock()
        // Day-long tokens: after an 8 h night neither is inside its margin (8640 s before expiry).
        http.tokenReplies = [FakeHTTP.tokenReply(access: "mail-1", expiresIn: 86400),
                             FakeHTTP.tokenReply(access: "work-1", expiresIn: 86400),
                             FakeHTTP.tokenReply(access: "work-2", expiresIn: 86400)]
        let broker = broker(store, http, clock, accounts: [work, mail])
        _ = try await broker.accessToken(account: "mail")
        clock.advance(.seconds(7200))
        _ = try await broker.accessToken(account: "work")
        clock.advance(.seconds(600))
        // mail was last used 2 h 10 min before the suspend, work 10 min before.
        await broker.systemSuspending()
        clock.advance(.seconds(8 * 3600))
        let refreshed = await broker.systemResumed()
        XCTAssertEqual(refreshed, [TokenEntry(account: "work", key: .default)],
                       "work was in use when the lid closed, although 8 h 10 min have passed since")
        let mailToken = try await broker.accessToken(account: "mail")
        XCTAssertEqual(mailToken.accessToken.reveal(), "mail-1", "an idle account's valid token is not stale")
        let workToken = try await broker.accessToken(account: "work")
        XCTAssertEqual(workToken.accessToken.reveal(), "work-2")
        XCTAssertEqual(http.tokenPosts.count, 3)
    }

    func testResumeWithTheServerDownServesTheStillValidTokenAndKeepsTheRefreshToken() async throws {
        let store = MemorySecretStore(items: [SecretKey(work): Secret("rt-1")])
        let http = FakeHTTP()
        let clock = ManualClock()
        http.tokenReplies = [FakeHTTP.tokenReply(access: "at-1", refresh: "rt-2", expiresIn: 3600)]
        let broker = broker(store, http, clock)
        _ = try await broker.accessToken(account: "work")
        await broker.systemSuspending()
        clock.advance(.seconds(1800))
        // Right after a resume the network is often not back yet.
        http.tokenFailures = [AuthError(.serverUnreachable, "cannot reach the server: connection refused")]
        _ = await broker.systemResumed()
        let served = try await broker.accessToken(account: "work")
        XCTAssertEqual(served.accessToken.reveal(), "at-1", "a valid token beats an error while the server is unreachable")
        XCTAssertEqual(http.tokenPosts.count, 2, "no second attempt during the backoff")
        let kept = await store.items[SecretKey(work)]
        XCTAssertEqual(kept?.reveal(), "rt-2")
    }

    func testNetworkUpRetriesARefreshInNetworkBackoffAtOnce() async throws {
        let store = MemorySecretStore(items: [SecretKey(work): Secret("rt-1")])
        let http = FakeHTTP()
        let clock = ManualClock()
        http.tokenReplies = [FakeHTTP.tokenReply(access: "at-1", refresh: "rt-2", expiresIn: 600)]
        let broker = broker(store, http, clock)
        _ = try await broker.accessToken(account: "work")
        clock.advance(.seconds(560))  // inside the margin, 40 s left
        let unreachable = AuthError(.serverUnreachable, "cannot reach the server: timed out")
        http.tokenFailures = Array(repeating: unreachable, count: 5)
        for _ in 0..<5 {
            await assertThrows(.serverUnreachable) { _ = try await broker.accessToken(account: "work", forceRefresh: true) }
        }
        let notBefore = await broker.accounts["work"]?.refresh.retryNotBefore
        XCTAssertGreaterThanOrEqual(notBefore.map { $0 - clock.now() } ?? .zero, .seconds(24), "5 failures: at least 24 s")
        let due = await broker.entriesDueForRefresh()
        XCTAssertEqual(due, [], "in backoff: the proactive loop would wait")

        http.tokenReplies = [FakeHTTP.tokenReply(access: "at-2", refresh: "rt-3", expiresIn: 600)]
        let retried = await broker.networkUp()
        XCTAssertEqual(retried, [TokenEntry(account: "work", key: .default)])
        XCTAssertEqual(http.tokenPosts.count, 7, "1 + 5 failures + the retry, with no caller asking")
        let token = try await broker.accessToken(account: "work")
        XCTAssertEqual(token.accessToken.reveal(), "at-2")
        let state = await broker.accounts["work"]
        XCTAssertNil(state?.refresh.retryNotBefore)
        XCTAssertEqual(state?.refresh.failures, 0)
        XCTAssertNil(state?.refresh.lastError)
    }

    func testNetworkUpKeepsAServersOwnBackoff() async throws {
        let store = MemorySecretStore(items: [SecretKey(work): Secret("rt-1")])
        let http = FakeHTTP()
        let clock = ManualClock()
        http.tokenReplies = [FakeHTTP.tokenReply(access: "at-1", refresh: "rt-2", expiresIn: 600),
                             HTTPReply(status: 503, body: [], retryAfter: "120")]
        let broker = broker(store, http, clock)
        _ = try await broker.accessToken(account: "work")
        await assertThrows(.serverError) { _ = try await broker.accessToken(account: "work", forceRefresh: true) }
        let before = await broker.accounts["work"]?.refresh.retryNotBefore
        let retried = await broker.networkUp()
        XCTAssertEqual(retried, [], "the server asked for 120 s; the network coming back changes nothing")
        let after = await broker.accounts["work"]?.refresh.retryNotBefore
        XCTAssertEqual(after, before)
        XCTAssertEqual(http.tokenPosts.count, 2)
    }

    func testNetworkUpEndsTheBackoffOfAnIdleAccountWithoutARequest() async throws {
        let store = MemorySecretStore(items: [SecretKey(work): Secret("rt-1")])
        let http = FakeHTTP()
        let clock = ManualClock()
        http.tokenReplies = [FakeHTTP.tokenReply(access: "at-1", refresh: "rt-2", expiresIn: 86400)]
        http.discovery["https://issuer.example/.well-known/openid-configuration"] = HTTPReply(status: 200, body: Fixtures.discoveryBody)
        // With the default policy a backoff (at most 5 min) always ends within the hour of "recent use"; a shorter
        // window shows the rule.
        let broker = TokenBroker(accounts: [work], store: store, http: http, redirects: FakeRedirects(),
                                 browser: FakeBrowser(), time: clock,
                                 policy: RefreshPolicy(recentUse: .seconds(60), backoffBase: .seconds(100)),
                                 random: { 0 }, logger: .init(label: "test"))
        _ = try await broker.accessToken(account: "work")
        http.tokenFailures = Array(repeating: AuthError(.serverUnreachable, "down"), count: 6)
        for _ in 0..<6 {
            await assertThrows(.serverUnreachable) { _ = try await broker.accessToken(account: "work", forceRefresh: true) }
        }
        clock.advance(.seconds(61))  // nobody asked for a minute; the backoff (225 s) still runs
        let retried = await broker.networkUp()
        XCTAssertEqual(retried, [], "nobody is waiting for this account: no request")
        let notBefore = await broker.accounts["work"]?.refresh.retryNotBefore
        XCTAssertNil(notBefore, "but its next caller does not wait out the old backoff")
        XCTAssertEqual(http.tokenPosts.count, 7)
    }
}
