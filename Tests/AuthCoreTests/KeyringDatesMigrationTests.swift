import AuthTestSupport
@testable import AuthCore
import Foundation
import XCTest

/// The sign-in's dates live beside the secret (``KeyringItem``, libsecret attributes), never inside it, so any agent
/// reads the secret as the bare credential. An item written with the dates in a header inside the secret (the form
/// before) is still read right, its token sent bare, and written again in the new form at the next refresh.
final class KeyringDatesMigrationTests: XCTestCase {
    let t0 = Date(timeIntervalSince1970: 1_800_000_000)
    let day: TimeInterval = 86400
    let key = SecretKey(Fixtures.account())

    /// A secret as the form before wrote it.
    func headerForm(_ credential: String, validUntil: Date, warnedAt: Date? = nil) -> Secret {
        func header(_ name: String, _ date: Date) -> String { "\u{1}\(name)=\(Int64(date.timeIntervalSince1970))\u{1}" }
        return Secret(header("valid_until", validUntil) + (warnedAt.map { header("warned_at", $0) } ?? "") + credential)
    }

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

    func testAnItemWithTheHeaderIsReadAndRewrittenInTheNewFormAtTheNextRefresh() async throws {
        let store = MemorySecretStore(items: [key: headerForm("rt-1", validUntil: t0 + 5 * day)])
        let http = FakeHTTP()
        let clock = ManualClock()
        http.tokenReplies = [reply(refresh: nil), reply(refresh: nil)]
        let broker = Fixtures.broker(store: store, http: http, clock: clock)

        _ = await broker.checkSignInLifetimes()
        let before = await broker.status()
        XCTAssertEqual(before.accounts[0].signInValidUntil, t0 + 5 * day, "the header's date is read")

        // A server that does not rotate (Google): nothing else would write the item.
        _ = try await broker.accessToken(account: "work")
        XCTAssertEqual(refreshTokensSent(http), ["rt-1"], "the token is sent without the header")
        let entry = await store.entries[key]
        let item = try XCTUnwrap(entry)
        XCTAssertEqual(item, KeyringItem(secret: Secret("rt-1"), validUntil: t0 + 5 * day), "rewritten in the new form")
        let writes = await store.writes

        _ = try await broker.accessToken(account: "work", forceRefresh: true)
        XCTAssertEqual(refreshTokensSent(http), ["rt-1", "rt-1"])
        let after = await store.writes
        XCTAssertEqual(after, writes, "once in the new form, an unmoved date is not written again")
    }

    func testAHeaderItemRotatedByTheServerIsWrittenBareWithItsDate() async throws {
        let store = MemorySecretStore(items: [key: headerForm("rt-1", validUntil: t0 + 5 * day, warnedAt: t0 - day)])
        let http = FakeHTTP()
        http.tokenReplies = [reply(refresh: "rt-2")]
        let broker = Fixtures.broker(store: store, http: http)
        _ = try await broker.accessToken(account: "work")
        XCTAssertEqual(refreshTokensSent(http), ["rt-1"])
        let entry = await store.entries[key]
        let item = try XCTUnwrap(entry)
        XCTAssertEqual(item, KeyringItem(secret: Secret("rt-2"), validUntil: t0 + 5 * day, warnedAt: t0 - day))
    }

    func testAHeaderItemsDeadTokenIsDeletedAsTheTokenItCarries() async throws {
        let store = MemorySecretStore(items: [key: headerForm("rt-1", validUntil: t0 + 5 * day)])
        let http = FakeHTTP()
        http.tokenReplies = [HTTPReply(status: 400, body: Array(#"{"error":"invalid_grant"}"#.utf8))]
        let broker = Fixtures.broker(store: store, http: http)
        do {
            _ = try await broker.accessToken(account: "work")
            XCTFail("a dead refresh token is sign-in required")
        } catch {
            XCTAssertEqual(error.code, .loginRequired)
        }
        let items = await store.items
        XCTAssertTrue(items.isEmpty)
    }

    func testALongLivedAccessTokenWithTheHeaderStaysOneAfterTheRewrite() async throws {
        let stored = StoredCredential.longLivedAccessToken(Secret("gho_x")).stored.reveal()
        let store = MemorySecretStore(items: [key: headerForm(stored, validUntil: t0 + 5 * day)])
        let broker = Fixtures.broker(store: store, http: FakeHTTP())
        let grant = try await broker.accessToken(account: "work")
        XCTAssertEqual(grant.accessToken, Secret("gho_x"))
        XCTAssertTrue(grant.doesNotExpire)
        let entry = await store.entries[key]
        XCTAssertEqual(entry, KeyringItem(secret: Secret(stored), validUntil: t0 + 5 * day),
                       "rewritten in the new form, though nothing was redeemed")
    }
}
