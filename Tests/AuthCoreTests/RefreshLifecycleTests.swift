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

    /// A broker call that must not wait on the clock: if it sleeps, the test fails and the sleeper is released (the
    /// clock jumps an hour), so a broken backoff fails the test instead of hanging it.
    func withoutWaiting<T: Sendable>(_ clock: ManualClock, file: StaticString = #filePath, line: UInt = #line,
                                     _ body: @escaping @Sendable () async throws -> T) async throws -> T {
        let call = Task { try await body() }
        let watch = Task {
            while !Task.isCancelled {
                if clock.sleepers > 0 {
                    XCTFail("the caller waited on the clock", file: file, line: line)
                    return clock.advance(.seconds(3600))
                }
                try? await Task.sleep(for: .milliseconds(1))
            }
        }
        defer { watch.cancel() }
        return try await call.value
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

    /// Issue 47: six failed refreshes in a row leave a 64 s backoff, yet a caller a second after the last failure asks
    /// the server again and, the server being back, gets a token; with nothing cached no caller waits out the backoff.
    func testAServerThatIsBackServesTheNextCallerWhateverTheBackoff() async throws {
        let store = MemorySecretStore(items: [key: Secret("rt-1")])
        let http = FakeHTTP()
        let clock = ManualClock()
        let broker = broker(store, http, clock, jitter: 0.5)
        for attempt in 1...6 {
            http.tokenReplies = [HTTPReply(status: 503, body: [])]
            await assertThrows(.serverError) { _ = try await self.withoutWaiting(clock) { try await broker.accessToken(account: "work") } }
            XCTAssertEqual(http.tokenPosts.count, attempt, "each caller a second apart asks the server once")
            clock.advance(.seconds(1))
        }
        let backoff = await broker.accounts["work"]?.refresh.retryNotBefore
        XCTAssertEqual(backoff, clock.now() - .seconds(1) + .seconds(64), "the proactive loop's backoff has grown")

        http.tokenReplies = [FakeHTTP.tokenReply(access: "at-1", refresh: "rt-2", expiresIn: 600)]
        let token = try await withoutWaiting(clock) { try await broker.accessToken(account: "work") }
        XCTAssertEqual(token.accessToken.reveal(), "at-1", "the server is back: served now, not in 63 s")
        let failures = await broker.accounts["work"]?.refresh.failures
        XCTAssertEqual(failures, 0)
    }

    /// Callers arriving moments after a failure wait the rest of the second (not the backoff), then one request
    /// asks the server for all of them; until then the server is not asked again, however many callers there are.
    func testCallersMomentsAfterAFailureWaitTheSecondOutAndShareOneRequest() async throws {
        let store = MemorySecretStore(items: [key: Secret("rt-1")])
        let http = FakeHTTP()
        let clock = ManualClock()
        let broker = broker(store, http, clock, jitter: 0.5)
        http.tokenReplies = [HTTPReply(status: 503, body: [])]
        await assertThrows(.serverError) { _ = try await broker.accessToken(account: "work") }

        clock.advance(.milliseconds(300))
        http.tokenReplies = [FakeHTTP.tokenReply(access: "at-1", refresh: "rt-2", expiresIn: 600)]
        let callers = (0..<8).map { _ in Task { try await broker.accessToken(account: "work") } }
        let asleep = await clock.waitForSleepers(8)
        XCTAssertTrue(asleep, "each caller waits the 0.7 s left")
        XCTAssertEqual(http.tokenPosts.count, 1, "nobody asked the server within the second")
        clock.advance(.milliseconds(700))
        for caller in callers {
            let token = try await caller.value
            XCTAssertEqual(token.accessToken.reveal(), "at-1")
        }
        XCTAssertEqual(http.tokenPosts.count, 2, "one request for the eight callers")
    }

    /// With the server's Retry-After, callers are told the truth and not kept waiting: they fail at once, saying when
    /// a request will ask the server again, and the server is not asked before.
    func testRetryAfterIsTheTimeCallersAreToldAndKept() async throws {
        let store = MemorySecretStore(items: [key: Secret("rt-1")])
        let http = FakeHTTP()
        let clock = ManualClock()
        let broker = broker(store, http, clock, jitter: 0.5)
        http.tokenReplies = [HTTPReply(status: 503, body: [], retryAfter: "30")]
        await assertThrows(.serverError) { _ = try await broker.accessToken(account: "work") }
        clock.advance(.seconds(10))
        do {
            _ = try await withoutWaiting(clock) { try await broker.accessToken(account: "work") }
            XCTFail("expected server_error")
        } catch let error as AuthError {
            XCTAssertEqual(error.code, .serverError)
            XCTAssertEqual(error.retryAfter, 20)
            XCTAssertTrue(error.message.hasSuffix("next attempt in 20 s"), error.message)
        }
        XCTAssertEqual(http.tokenPosts.count, 1)
        clock.advance(.seconds(20))
        http.tokenReplies = [FakeHTTP.tokenReply(access: "at-1", refresh: "rt-2", expiresIn: 600)]
        let token = try await broker.accessToken(account: "work")
        XCTAssertEqual(token.accessToken.reveal(), "at-1", "asked again when it said")
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
