import AuthTestSupport
@testable import AuthCore
import Foundation
import XCTest

/// The broker publishes every change of an account's cached token to its ``TokenSnapshot``, and the snapshot serves
/// exactly what the broker would serve from its cache without starting work. Manual clock, fixed jitter: no sleeping.
final class TokenSnapshotTests: XCTestCase {
    let key = SecretKey(Fixtures.account())

    func broker(_ store: MemorySecretStore, _ http: FakeHTTP, _ clock: ManualClock) -> TokenBroker {
        http.discovery["https://issuer.example/.well-known/openid-configuration"] = HTTPReply(status: 200, body: Fixtures.discoveryBody)
        return TokenBroker(accounts: [Fixtures.account()], store: store, http: http, redirects: FakeRedirects(),
                           browser: FakeBrowser(), time: clock, random: { 0 }, logger: .init(label: "test"))
    }

    func testARefreshedTokenIsPublishedAndServedAsTheBrokerServesIt() async throws {
        let clock = ManualClock()
        let http = FakeHTTP()
        http.tokenReplies = [FakeHTTP.tokenReply(access: "at-1", refresh: "rt-2", expiresIn: 3600)]
        let broker = broker(MemorySecretStore(items: [key: Secret("rt-1")]), http, clock)
        XCTAssertNil(broker.snapshot.freshToken(account: "work", minValid: .zero), "nothing cached yet")
        _ = try await broker.accessToken(account: "work")
        clock.advance(.seconds(100))
        let fromBroker = try await broker.accessToken(account: "work")
        let hit = try XCTUnwrap(broker.snapshot.freshToken(account: "work", minValid: .zero))
        XCTAssertEqual(hit.grant.accessToken, fromBroker.accessToken)
        XCTAssertEqual(hit.grant.tokenType, fromBroker.tokenType)
        XCTAssertEqual(hit.grant.expiresIn, fromBroker.expiresIn)
        XCTAssertEqual(hit.grant.expiresAt, fromBroker.expiresAt)
        XCTAssertEqual(hit.grant.scopes, fromBroker.scopes)
        XCTAssertNil(hit.grant.idToken, "the fast path never carries the ID token")
        XCTAssertEqual(http.tokenPosts.count, 1)
    }

    func testMinValidUsesTheBrokersFreshnessRule() async throws {
        let clock = ManualClock()
        let http = FakeHTTP()
        http.tokenReplies = [FakeHTTP.tokenReply(access: "at-1", refresh: "rt-2", expiresIn: 3600)]
        let broker = broker(MemorySecretStore(items: [key: Secret("rt-1")]), http, clock)
        _ = try await broker.accessToken(account: "work")
        clock.advance(.seconds(600))
        XCTAssertNotNil(broker.snapshot.freshToken(account: "work", minValid: .seconds(3000)), "3000 s left, 3000 s asked")
        XCTAssertNil(broker.snapshot.freshToken(account: "work", minValid: .seconds(3001)))
    }

    /// Inside the early-refresh margin the broker serves the token and refreshes behind the caller; the snapshot
    /// leaves that to the broker, and publishes the new token when the refresh lands.
    func testInsideTheMarginTheSnapshotDefersToTheBrokerAndGetsTheRefreshedToken() async throws {
        let clock = ManualClock()
        let http = FakeHTTP()
        http.tokenReplies = [FakeHTTP.tokenReply(access: "at-1", refresh: "rt-2", expiresIn: 3600),
                             FakeHTTP.tokenReply(access: "at-2", refresh: "rt-3", expiresIn: 3600)]
        let broker = broker(MemorySecretStore(items: [key: Secret("rt-1")]), http, clock)
        _ = try await broker.accessToken(account: "work")
        clock.advance(.seconds(3239))
        XCTAssertNotNil(broker.snapshot.freshToken(account: "work", minValid: .zero))
        clock.advance(.seconds(1))
        XCTAssertNil(broker.snapshot.freshToken(account: "work", minValid: .zero), "at the refresh moment (3600 - 360 s)")
        _ = await broker.refreshDueAccounts()
        let hit = try XCTUnwrap(broker.snapshot.freshToken(account: "work", minValid: .zero))
        XCTAssertEqual(hit.grant.accessToken.reveal(), "at-2")
    }

    func testExpiryLogoutAndInvalidGrantTakeTheTokenOut() async throws {
        let clock = ManualClock()
        let http = FakeHTTP()
        http.tokenReplies = [FakeHTTP.tokenReply(access: "at-1", refresh: "rt-2", expiresIn: 3600),
                             FakeHTTP.errorReply(400, "invalid_grant"),
                             FakeHTTP.tokenReply(access: "at-3", refresh: "rt-4", expiresIn: 3600)]
        let store = MemorySecretStore(items: [key: Secret("rt-1")])
        let broker = broker(store, http, clock)
        _ = try await broker.accessToken(account: "work")
        clock.advance(.seconds(3595))
        XCTAssertNil(broker.snapshot.freshToken(account: "work", minValid: .zero), "5 s left: expired for the policy")
        XCTAssertNotNil(broker.snapshot.entry("work"))

        // invalid_grant: the cache is dropped, and with it the snapshot's entry.
        do {
            _ = try await broker.accessToken(account: "work", forceRefresh: true)
            XCTFail("invalid_grant must fail")
        } catch {
            XCTAssertEqual(error.code, .loginRequired)
        }
        XCTAssertNil(broker.snapshot.entry("work"))

        // Logout drops it too.
        try await store.store(Secret("rt-5"), for: key)
        _ = try await broker.accessToken(account: "work")
        XCTAssertNotNil(broker.snapshot.freshToken(account: "work", minValid: .zero))
        _ = try await broker.logout(account: "work")
        XCTAssertNil(broker.snapshot.entry("work"))
        XCTAssertNil(broker.snapshot.freshToken(account: "work", minValid: .zero))
    }

    /// Proactive refresh keeps recently used accounts fresh; a use through the snapshot counts.
    func testFastPathUseCountsAsRecentUseForProactiveRefresh() async throws {
        let clock = ManualClock()
        let http = FakeHTTP()
        http.tokenReplies = [FakeHTTP.tokenReply(access: "at-1", refresh: "rt-2", expiresIn: 3600)]
        let broker = broker(MemorySecretStore(items: [key: Secret("rt-1")]), http, clock)
        _ = try await broker.accessToken(account: "work")  // broker use at 0 s
        clock.advance(.seconds(3000))
        XCTAssertNotNil(broker.snapshot.freshToken(account: "work", minValid: .zero))  // fast-path use at 3000 s
        clock.advance(.seconds(3300))  // 6300 s: the broker's own record alone is over an hour old
        var due = await broker.accountsDueForRefresh()
        XCTAssertEqual(due, ["work"], "used through the fast path 3300 s ago")
        clock.advance(.seconds(400))
        due = await broker.accountsDueForRefresh()
        XCTAssertEqual(due, [], "no use at all for over an hour")
    }

    /// The proactive loop computed its sleep without an account nobody used; the first fast-path use of an idle
    /// account must wake it (else a short-lived token expires during the loop's 60 s nap), later uses must not.
    func testFirstFastPathUseOfAnIdleAccountWakesTheProactiveLoop() async throws {
        let clock = ManualClock()
        let http = FakeHTTP()
        http.tokenReplies = [FakeHTTP.tokenReply(access: "at-1", refresh: "rt-2", expiresIn: 3600)]
        let broker = broker(MemorySecretStore(items: [key: Secret("rt-1")]), http, clock)
        _ = try await broker.accessToken(account: "work")
        let bell = broker.proactiveBell
        if bell.hasPendingRing { await bell.wait() }  // the ring for the new token
        XCTAssertFalse(bell.hasPendingRing)

        XCTAssertNotNil(broker.snapshot.freshToken(account: "work", minValid: .zero))
        XCTAssertTrue(bell.hasPendingRing, "the first use through the snapshot rings")
        await bell.wait()
        clock.advance(.seconds(60))
        XCTAssertNotNil(broker.snapshot.freshToken(account: "work", minValid: .zero))
        XCTAssertFalse(bell.hasPendingRing, "a use of an account in use does not")
    }

    func testAnAttachmentLivesOnlyAsLongAsItsToken() async throws {
        final class Box: Sendable {}
        let clock = ManualClock()
        let http = FakeHTTP()
        http.tokenReplies = [FakeHTTP.tokenReply(access: "at-1", refresh: "rt-2", expiresIn: 3600),
                             FakeHTTP.tokenReply(access: "at-2", refresh: "rt-3", expiresIn: 3600)]
        let broker = broker(MemorySecretStore(items: [key: Secret("rt-1")]), http, clock)
        _ = try await broker.accessToken(account: "work")
        let hit = try XCTUnwrap(broker.snapshot.freshToken(account: "work", minValid: .zero))
        broker.snapshot.attach(Box(), account: "work", generation: hit.generation &+ 1)
        XCTAssertNil(broker.snapshot.entry("work")?.attachment, "not for another generation")
        broker.snapshot.attach(Box(), account: "work", generation: hit.generation)
        XCTAssertNotNil(broker.snapshot.freshToken(account: "work", minValid: .zero)?.attachment)
        _ = try await broker.accessToken(account: "work", forceRefresh: true)
        XCTAssertNil(broker.snapshot.entry("work")?.attachment, "a new token starts without one")
        XCTAssertEqual(broker.snapshot.freshToken(account: "work", minValid: .zero)?.grant.accessToken.reveal(), "at-2")
    }

}
