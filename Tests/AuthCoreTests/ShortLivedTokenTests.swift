import AuthTestSupport
@testable import AuthCore
import Foundation
import XCTest

/// `min_valid` means "fresh enough, or the freshest the server will give": a server whose tokens live shorter than a
/// caller asks for (30 s tokens and a 60 s `min_valid`; Google's 3599 s and 3600 s) still serves every caller, with
/// the token's real expiry, and without a refresh per request.
final class ShortLivedTokenTests: XCTestCase {
    let key = SecretKey(Fixtures.account())

    func testTheRuleCapsMinValidAtWhatAFreshTokenHasLeftAtItsEarlyRefresh() {
        let policy = RefreshPolicy()
        let t0 = ContinuousClock.now
        let short = Duration.seconds(30)
        XCTAssertEqual(policy.attainable(lifetime: short), .seconds(15), "a 30 s token is due for refresh at 15 s left")
        XCTAssertTrue(policy.isFresh(expiresAt: t0 + short, lifetime: short, now: t0, minValid: .seconds(60)))
        XCTAssertTrue(policy.isFresh(expiresAt: t0 + short, lifetime: short, now: t0 + .seconds(15), minValid: .seconds(60)))
        XCTAssertFalse(policy.isFresh(expiresAt: t0 + short, lifetime: short, now: t0 + .seconds(16), minValid: .seconds(60)))
        let google = Duration.seconds(3599)
        XCTAssertTrue(policy.isFresh(expiresAt: t0 + google, lifetime: google, now: t0, minValid: .seconds(3600)))
        // Below the cap the caller's bound is exact, as before.
        XCTAssertFalse(policy.isFresh(expiresAt: t0 + .seconds(600), lifetime: .seconds(3600), now: t0, minValid: .seconds(601)))
        // The agent's own floor still holds for tokens shorter than it.
        XCTAssertFalse(policy.isFresh(expiresAt: t0 + .seconds(5), lifetime: .seconds(5), now: t0, minValid: .zero))
    }

    func testThirtySecondTokensServeSixtySecondCallersWithTheirRealExpiryAndNoStorm() async throws {
        let store = MemorySecretStore(items: [key: Secret("rt-1")])
        let http = FakeHTTP()
        let clock = ManualClock()
        http.tokenReplies = [FakeHTTP.tokenReply(access: "at-1", refresh: "rt-2", expiresIn: 30),
                             FakeHTTP.tokenReply(access: "at-2", refresh: "rt-3", expiresIn: 30)]
        let broker = Fixtures.broker(store: store, http: http, clock: clock)

        let first = try await broker.accessToken(account: "work", minValid: .seconds(60))
        XCTAssertEqual(first.accessToken.reveal(), "at-1")
        XCTAssertEqual(first.expiresIn, .seconds(30), "handed over with its real expiry")
        // Many callers asking for 60 s within the token's fresh part share it: no refresh per request.
        for _ in 0..<20 {
            let again = try await broker.accessToken(account: "work", minValid: .seconds(60))
            XCTAssertEqual(again.accessToken.reveal(), "at-1")
        }
        XCTAssertEqual(http.tokenPosts.count, 1)

        // Past its early-refresh moment a caller wanting 60 s gets the next token (the freshest there is).
        clock.advance(.seconds(20))
        let next = try await broker.accessToken(account: "work", minValid: .seconds(60))
        XCTAssertEqual(next.accessToken.reveal(), "at-2")
        XCTAssertEqual(next.expiresIn, .seconds(30))
        XCTAssertEqual(http.tokenPosts.count, 2)
    }

    func testATokenShorterThanTheAgentsFloorIsStillUnsatisfiable() async throws {
        let store = MemorySecretStore(items: [key: Secret("rt-1")])
        let http = FakeHTTP()
        http.tokenReplies = [FakeHTTP.tokenReply(access: "at-1", refresh: "rt-2", expiresIn: 5)]
        let broker = Fixtures.broker(store: store, http: http)
        await assertThrows(.minValidUnsatisfiable) { _ = try await broker.accessToken(account: "work") }
    }
}
