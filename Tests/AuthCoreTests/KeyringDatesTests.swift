import AuthTestSupport
@testable import AuthCore
import Foundation
import XCTest

/// The sign-in's dates live beside the secret (``KeyringItem``, libsecret attributes), never inside it, so any agent
/// reads the secret as the bare credential.
final class KeyringDatesTests: XCTestCase {
    let t0 = Date(timeIntervalSince1970: 1_800_000_000)
    let day: TimeInterval = 86400
    let key = SecretKey(Fixtures.account())

    func reply(refresh: String?) -> HTTPReply {
        var object: [String: Any] = ["access_token": "at-\(UUID().uuidString)", "token_type": "Bearer", "expires_in": 3600]
        if let refresh { object["refresh_token"] = refresh }
        return HTTPReply(status: 200, body: Array(try! JSONSerialization.data(withJSONObject: object)))
    }

    func refreshTokensSent(_ http: FakeHTTP) -> [String?] {
        http.posts.filter { $0.fields["grant_type"] == "refresh_token" }.map { $0.fields["refresh_token"] }
    }

    func testANewItemKeepsTheDatesOutOfTheSecret() async throws {
        let store = MemorySecretStore()
        let http = FakeHTTP()
        let clock = ManualClock()
        var account = Fixtures.account()
        account.signInLifetime = SignInLifetime(period: .seconds(30 * 86400), kind: .fixed)
        http.tokenReplies = [reply(refresh: "rt-2")]
        let broker = Fixtures.broker(accounts: [account], store: store, http: http, clock: clock)
        try await store.store(KeyringItem(secret: Secret("rt-1"), validUntil: t0 + 5 * day), for: key)
        _ = try await broker.accessToken(account: "work")
        XCTAssertEqual(refreshTokensSent(http), ["rt-1"])
        let entry = await store.entries[key]
        let item = try XCTUnwrap(entry)
        XCTAssertEqual(item.secret, Secret("rt-2"), "the secret is the bare rotated token")
        XCTAssertEqual(item.validUntil, t0 + 5 * day, "a fixed period does not move with a refresh")
        let status = await broker.status()
        XCTAssertEqual(status.accounts[0].signInValidUntil, t0 + 5 * day)
    }
}
