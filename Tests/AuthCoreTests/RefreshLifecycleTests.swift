import AuthTestSupport
@testable import AuthCore
import Foundation
import XCTest

/// Backoff, outage behaviour and proactive refresh, on a manual clock with fixed jitter: nothing sleeps.
final class RefreshLifecycleTests: XCTestCase {
    let key = SecretKey(Fixtures.account())

    func broker(_ store: MemorySecretStore, _ http: FakeHTTP, _ clock: ManualClock, jitter: Double = 0) -> TokenBroker {
        http.discovery["https://issuer.example/.well-known/openid-configuration"] = HTTPReply(status: 200, body: Fixtures.discoveryBody)
        return TokenBroker(accounts: [Fixtures.account()], store: store, http: http, redirects: FakeRedirects(),
                           browser: FakeBrowser(), time: clock, random: { jitter }, logger: .init(label: "test"))
    }

    func testPolicyMargins() {
        let policy = RefreshPolicy()
        XCTAssertEqual(policy.earlyMargin(lifetime: .seconds(3600), jitter: 0), .seconds(360), "10 % of an hour")
        XCTAssertEqual(policy.earlyMargin(lifetime: .seconds(300), jitter: 0), .seconds(60), "at least 60 s")
        XCTAssertEqual(policy.earlyMargin(lifetime: .seconds(60), jitter: 0), .seconds(30), "at most half the lifetime")
        XCTAssertEqual(policy.earlyMargin(lifetime: .seconds(3600), jitter: 1), .seconds(432), "jitter adds up to 20 %")
    }

    func testBackoffGrowsCapsAndHonoursRetryAfter() {
        let policy = RefreshPolicy()
        XCTAssertEqual(policy.backoff(failures: 1, retryAfter: nil, jitter: 0.5), .seconds(2))
        XCTAssertEqual(policy.backoff(failures: 2, retryAfter: nil, jitter: 0.5), .seconds(4))
        XCTAssertEqual(policy.backoff(failures: 5, retryAfter: nil, jitter: 0.5), .seconds(32))
        XCTAssertEqual(policy.backoff(failures: 30, retryAfter: nil, jitter: 0.5), .seconds(300), "capped")
        XCTAssertEqual(policy.backoff(failures: 1, retryAfter: nil, jitter: 0), .seconds(1.5), "-25 % jitter")
        XCTAssertEqual(policy.backoff(failures: 1, retryAfter: 120, jitter: 0.5), .seconds(120), "Retry-After is a floor")
        XCTAssertTrue(RefreshPolicy.isTransient(.serverError))
        XCTAssertFalse(RefreshPolicy.isTransient(.loginRequired))
        XCTAssertFalse(RefreshPolicy.isTransient(.invalidClient))
    }

    /// RFC 6749 §6: a refresh reply may leave out the refresh token (the one sent stays valid), and `expires_in` is
    /// only recommended (Salesforce leaves both out). Such a token expires like any other, after the default hour: it
    /// is not the long-lived token of a sign-in that got no refresh token, and the refresh token is kept.
    func testARefreshReplyWithoutExpiryOrNewRefreshTokenIsAnOrdinaryToken() async throws {
        let store = MemorySecretStore(items: [key: Secret("rt-1")])
        let http = FakeHTTP()
        http.tokenReplies = [HTTPReply(status: 200, body: Array(#"{"access_token":"at-1","token_type":"Bearer"}"#.utf8)),
                             FakeHTTP.tokenReply(access: "at-2")]
        let clock = ManualClock()
        let broker = broker(store, http, clock)
        let first = try await broker.accessToken(account: "work")
        XCTAssertEqual(first.accessToken.reveal(), "at-1")
        XCTAssertFalse(first.doesNotExpire)
        XCTAssertEqual(first.expiresIn, TokenResponseParser.defaultLifetime)
        let kept = await store.items[key]
        XCTAssertEqual(kept?.reveal(), "rt-1", "the refresh token stays")
        clock.advance(.seconds(3600))
        let next = try await broker.accessToken(account: "work")
        XCTAssertEqual(next.accessToken.reveal(), "at-2", "refreshed when the hour is up")
        XCTAssertEqual(http.tokenPosts.map { $0["refresh_token"] }, ["rt-1", "rt-1"])
    }

    func testOutageServesStillValidTokenAndBacksOff() async throws {
        let store = MemorySecretStore(items: [key: Secret("rt-1")])
        let http = FakeHTTP()
        let clock = ManualClock()
        http.tokenReplies = [FakeHTTP.tokenReply(access: "at-1", refresh: "rt-2", expiresIn: 600)]
        let broker = broker(store, http, clock, jitter: 0.5)
        _ = try await broker.accessToken(account: "work")

        // The server goes down. A caller that needs more than the cached token has still gets the cached token.
        http.tokenReplies = [HTTPReply(status: 503, body: [], retryAfter: "30")]
        clock.advance(.seconds(100))
        let during = try await broker.accessToken(account: "work", minValid: .seconds(3600))
        XCTAssertEqual(during.accessToken.reveal(), "at-1")
        XCTAssertEqual(http.tokenPosts.count, 2)

        // Within the backoff window (Retry-After 30 s) the server is not asked again.
        clock.advance(.seconds(10))
        _ = try await broker.accessToken(account: "work", minValid: .seconds(3600))
        XCTAssertEqual(http.tokenPosts.count, 2, "no request during backoff")

        // Once the cached token has expired, the caller gets the cause, with the time to wait.
        clock.advance(.seconds(600))
        http.tokenReplies = [HTTPReply(status: 503, body: [])]
        do {
            _ = try await broker.accessToken(account: "work")
            XCTFail("expected server_error")
        } catch {
            XCTAssertEqual(error.code, .serverError)
        }
        let kept = await store.items[key]
        XCTAssertEqual(kept?.reveal(), "rt-2", "no outage loses the refresh token")

        // Back up: the next attempt after the backoff succeeds and resets it.
        clock.advance(.seconds(400))
        http.tokenReplies = [FakeHTTP.tokenReply(access: "at-2", refresh: "rt-3", expiresIn: 600)]
        let after = try await broker.accessToken(account: "work")
        XCTAssertEqual(after.accessToken.reveal(), "at-2")
        let failures = await broker.accounts["work"]?.refresh.failures
        XCTAssertEqual(failures, 0)
    }

    func testForcedRefreshReportsTheOutageInsteadOfAnOldToken() async throws {
        let store = MemorySecretStore(items: [key: Secret("rt-1")])
        let http = FakeHTTP()
        let clock = ManualClock()
        http.tokenReplies = [FakeHTTP.tokenReply(access: "at-1", expiresIn: 600), HTTPReply(status: 502, body: [])]
        let broker = broker(store, http, clock)
        _ = try await broker.accessToken(account: "work")
        do {
            _ = try await broker.accessToken(account: "work", forceRefresh: true)
            XCTFail("a forced refresh must not silently return the old token")
        } catch {
            XCTAssertEqual(error.code, .serverError)
        }
    }

    func testProactiveRefreshOnlyForRecentlyUsedAccountsPastTheMargin() async throws {
        let store = MemorySecretStore(items: [key: Secret("rt-1")])
        let http = FakeHTTP()
        let clock = ManualClock()
        http.tokenReplies = [FakeHTTP.tokenReply(access: "at-1", refresh: "rt-2", expiresIn: 3600),
                             FakeHTTP.tokenReply(access: "at-2", refresh: "rt-3", expiresIn: 3600)]
        let broker = broker(store, http, clock, jitter: 0)
        var due = await broker.entriesDueForRefresh().map(\.account)
        XCTAssertEqual(due, [], "nothing cached, nothing due")
        _ = try await broker.accessToken(account: "work")

        clock.advance(.seconds(3000))
        due = await broker.entriesDueForRefresh().map(\.account)
        XCTAssertEqual(due, [], "3000 s into 3600: not yet inside the 360 s margin")
        let wait = await broker.nextProactiveCheck(ceiling: .seconds(3600))
        XCTAssertEqual(wait, .seconds(240))

        clock.advance(.seconds(250))
        due = await broker.entriesDueForRefresh().map(\.account)
        XCTAssertEqual(due, ["work"])
        let refreshed = await broker.refreshDueAccounts()
        XCTAssertEqual(refreshed, ["work"])
        let token = try await broker.accessToken(account: "work")
        XCTAssertEqual(token.accessToken.reveal(), "at-2", "the caller gets the proactively refreshed token")
        XCTAssertEqual(http.tokenPosts.count, 2)

        // An account nobody asked for in the last hour is left alone.
        clock.advance(.seconds(3300))
        due = await broker.entriesDueForRefresh().map(\.account)
        XCTAssertEqual(due, ["work"], "used at the last accessToken call, 3300 s ago")
        clock.advance(.seconds(400))
        due = await broker.entriesDueForRefresh().map(\.account)
        XCTAssertEqual(due, [], "not used for over an hour")
    }

    /// The loop wakes when a token falls due, not on a timer: an hourly token in use is refreshed once, at its
    /// early-refresh moment, with no round in the 54 minutes before it (each round re-maps the code the idle agent
    /// gave back). Under a one-minute poll, every `advance` below would end a round and fail the count.
    func testTheProactiveLoopSleepsUntilATokenFallsDue() async throws {
        let store = MemorySecretStore(items: [key: Secret("rt-1")])
        let http = FakeHTTP()
        let clock = ManualClock()
        http.tokenReplies = [FakeHTTP.tokenReply(access: "at-1", refresh: "rt-2", expiresIn: 3600),
                             FakeHTTP.tokenReply(access: "at-2", refresh: "rt-3", expiresIn: 3600)]
        let broker = broker(store, http, clock, jitter: 0)
        _ = try await broker.accessToken(account: "work")
        let (rounds, roundEnded) = AsyncStream.makeStream(of: Int.self)
        let loop = Task { await broker.runProactiveRefresh(afterRound: { roundEnded.yield(http.tokenPosts.count) }) }
        defer { loop.cancel() }
        var ended = rounds.makeAsyncIterator()
        let first = await ended.next()
        XCTAssertEqual(first, 1, "the use rang the bell: one round, nothing due yet")
        var asleep = await clock.waitForSleepers(1)
        XCTAssertTrue(asleep)
        for _ in 0..<50 {
            clock.advance(.seconds(60))
            asleep = await clock.waitForSleepers(1)
            XCTAssertTrue(asleep)
        }
        // 3000 s in; the early-refresh moment is at 3240 s (a 360 s margin).
        clock.advance(.seconds(240))
        let next = await ended.next()
        XCTAssertEqual(next, 2, "the next round is the refresh itself, not one of fifty idle ones")
    }

    func testTokenInsideMarginIsServedAndRefreshedBehindTheCaller() async throws {
        let store = MemorySecretStore(items: [key: Secret("rt-1")])
        let http = FakeHTTP()
        let clock = ManualClock()
        http.tokenReplies = [FakeHTTP.tokenReply(access: "at-1", refresh: "rt-2", expiresIn: 3600),
                             FakeHTTP.tokenReply(access: "at-2", refresh: "rt-3", expiresIn: 3600)]
        let broker = broker(store, http, clock, jitter: 0)
        _ = try await broker.accessToken(account: "work")
        clock.advance(.seconds(3300))
        let served = try await broker.accessToken(account: "work")
        XCTAssertEqual(served.accessToken.reveal(), "at-1", "served at once, not after a refresh")
        for _ in 0..<100 where http.tokenPosts.count < 2 { try await Task.sleep(for: .milliseconds(5)) }
        XCTAssertEqual(http.tokenPosts.count, 2, "a refresh started behind the caller")
        for _ in 0..<100 {
            if try await broker.accessToken(account: "work").accessToken.reveal() == "at-2" { break }
            try await Task.sleep(for: .milliseconds(5))
        }
        let next = try await broker.accessToken(account: "work")
        XCTAssertEqual(next.accessToken.reveal(), "at-2")
        XCTAssertEqual(http.tokenPosts.count, 2)
    }

    func testStatusDoesNotWaitForAHungKeyring() async throws {
        let clock = ManualClock()
        let hung = TokenBroker(accounts: [Fixtures.account()], store: HungStore(), http: FakeHTTP(), redirects: FakeRedirects(),
                               browser: FakeBrowser(), time: clock, logger: .init(label: "test"))
        let status = Task { await hung.status() }
        let sleeping = await clock.waitForSleepers(1)
        XCTAssertTrue(sleeping, "the keyring probe is not bounded on the broker's clock")
        clock.advance(TokenBroker.keyringProbeLimit)
        let seen = await status.value
        XCTAssertEqual(seen.keyring, .error, "bounded by keyringProbeLimit, not the keyring")
        XCTAssertNil(seen.accounts.first?.hasRefreshToken)
    }
}

/// A keyring that never answers (until cancelled): a stopped daemon, an unanswered unlock prompt.
struct HungStore: SecretStore {
    func hang() async { try? await Task.sleep(for: .seconds(3600)) }
    func loadItem(_ key: SecretKey) async throws(AuthError) -> KeyringItem? { await hang(); throw AuthError(.keyringError, "cancelled") }
    func storedKeys() async throws(AuthError) -> Set<SecretKey> { await hang(); throw AuthError(.keyringError, "cancelled") }
    func store(_ item: KeyringItem, for key: SecretKey) async throws(AuthError) { await hang() }
    func delete(_ key: SecretKey) async throws(AuthError) -> Bool { await hang(); return false }
    func state() async -> KeyringState { await hang(); return .error }
}
