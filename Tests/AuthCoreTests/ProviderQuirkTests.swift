import AuthTestSupport
@testable import AuthCore
import Foundation
import XCTest

/// The pure side of each preset provider's documented behaviour (the e2e side is e2e/test_provider_quirks.py, where
/// each quirk cites its documentation).
final class ProviderQuirkTests: XCTestCase {
    let now = ContinuousClock.now
    let key = SecretKey(Fixtures.account())

    func reply(_ text: String, status: Int = 200) -> HTTPReply { HTTPReply(status: status, body: Array(text.utf8)) }

    // MARK: Microsoft

    func testMicrosoftRefreshSendsTheConfiguredScopes() async throws {
        let account = Fixtures.account(scopes: ["offline_access", "https://outlook.office.com/IMAP.AccessAsUser.All"])
        let store = MemorySecretStore(items: [SecretKey(account): Secret("rt-1")])
        let http = FakeHTTP()
        http.tokenReplies = [FakeHTTP.tokenReply(access: "at-1", refresh: "rt-2")]
        let broker = Fixtures.broker(accounts: [account], store: store, http: http)
        _ = try await broker.accessToken(account: "work")
        XCTAssertEqual(http.tokenPosts.first?["scope"], "offline_access https://outlook.office.com/IMAP.AccessAsUser.All")
        // A resource alone keeps the granted scopes; a subset names itself (TokenCacheKey).
        XCTAssertEqual(TokenCacheKey.default.refreshFields(configuredScopes: []).count, 0)
    }

    func testMicrosoftDeadRefreshTokensSaySignInAgainWithTheReason() {
        let inactive = TokenResponseParser.error(from: reply(#"{"error":"invalid_grant","error_description":"AADSTS700082: The refresh token has expired due to inactivity. The token was issued on 2026-01-01 and was inactive for 90.00:00:00. Trace ID: 1"}"#, status: 400))
        XCTAssertEqual(inactive.code, .loginRequired)
        XCTAssertTrue(inactive.message.contains("without use") && inactive.message.contains("AADSTS700082"), inactive.message)
        let revoked = TokenResponseParser.error(from: reply(#"{"error":"invalid_grant","error_description":"AADSTS50173: The provided grant has expired due to it being revoked. The user might have changed or reset their password."}"#, status: 400))
        XCTAssertEqual(revoked.code, .loginRequired)
        XCTAssertTrue(revoked.message.contains("password") && revoked.message.contains("AADSTS50173"), revoked.message)
    }

    // MARK: GitHub

    func testGitHubFormEncodedAnswerIsRead() throws {
        let set = try TokenResponseParser.parse(reply("access_token=gho_16C7e42F292c6912E7710c838347Ae178B4a&scope=repo%2Cgist&token_type=bearer"), receivedAt: now)
        XCTAssertEqual(set.accessToken.reveal(), "gho_16C7e42F292c6912E7710c838347Ae178B4a")
        XCTAssertEqual(set.scopes, ["repo", "gist"])
        let app = try TokenResponseParser.parse(reply("access_token=ghu_x&expires_in=28800&refresh_token=ghr_y&refresh_token_expires_in=15811200&scope=&token_type=bearer"), receivedAt: now)
        XCTAssertEqual(app.lifetime, .seconds(28800))
        XCTAssertEqual(app.refreshToken?.reveal(), "ghr_y")
        XCTAssertEqual(app.scopes, [])
    }

    func testGitHubErrorsWithHTTP200AreErrors() {
        for (body, code) in [(#"{"error":"bad_refresh_token","error_description":"The refresh token passed is incorrect or expired."}"#, AuthError.Code.loginRequired),
                             ("error=bad_refresh_token&error_description=The+refresh+token+passed+is+incorrect+or+expired.", .loginRequired),
                             (#"{"error":"bad_verification_code","error_description":"The code passed is incorrect or expired."}"#, .loginRequired),
                             (#"{"error":"incorrect_client_credentials"}"#, .serverError)] {
            XCTAssertThrowsError(try TokenResponseParser.parse(reply(body), receivedAt: now), body) { error in
                XCTAssertEqual((error as? AuthError)?.code, code, body)
            }
        }
    }

    func testGitHubCommaSeparatedScopesAreSplit() throws {
        let set = try TokenResponseParser.parse(reply(#"{"access_token":"gho_x","scope":"repo,gist","token_type":"bearer"}"#), receivedAt: now)
        XCTAssertEqual(set.scopes, ["repo", "gist"])
    }

    func testGitHubBadRefreshTokenDropsTheSignIn() async throws {
        let store = MemorySecretStore(items: [key: Secret("ghr_old")])
        let http = FakeHTTP()
        http.tokenReplies = [reply(#"{"error":"bad_refresh_token","error_description":"The refresh token passed is incorrect or expired."}"#)]
        let broker = Fixtures.broker(store: store, http: http)
        await assertThrows(.loginRequired) { _ = try await broker.accessToken(account: "work") }
        let stored = await store.items[key]
        XCTAssertNil(stored)
    }

    func testGitHubOAuthAppTokenIsTheLongLivedCredential() async throws {
        let set = try TokenResponseParser.parse(reply(#"{"access_token":"gho_x","scope":"repo","token_type":"bearer"}"#), receivedAt: now)
        XCTAssertTrue(set.nonExpiring)
        XCTAssertFalse(try TokenResponseParser.parse(reply(#"{"access_token":"a","token_type":"bearer","refresh_token":"r"}"#), receivedAt: now).nonExpiring)
        XCTAssertFalse(try TokenResponseParser.parse(reply(#"{"access_token":"a","token_type":"bearer","expires_in":60}"#), receivedAt: now).nonExpiring)
        XCTAssertEqual(try StoredCredential(stored: StoredCredential.longLivedAccessToken(Secret("gho_x")).stored), .longLivedAccessToken(Secret("gho_x")))
        XCTAssertEqual(try StoredCredential(stored: Secret("ghr_y")), .refreshToken(Secret("ghr_y")))

        // Stored in the keyring at sign-in, served after a "restart" (a new broker) without any token request,
        // and shown without an expiry in status.
        let store = MemorySecretStore(items: [key: StoredCredential.longLivedAccessToken(Secret("gho_x")).stored])
        let http = FakeHTTP()
        let broker = Fixtures.broker(store: store, http: http)
        let grant = try await broker.accessToken(account: "work", minValid: .seconds(3600))
        XCTAssertEqual(grant.accessToken.reveal(), "gho_x")
        let forced = try await broker.accessToken(account: "work", forceRefresh: true)
        XCTAssertEqual(forced.accessToken.reveal(), "gho_x")
        XCTAssertTrue(http.tokenPosts.isEmpty, "nothing to redeem")
        let status = await broker.status()
        XCTAssertEqual(status.accounts.first?.hasRefreshToken, true)
        XCTAssertNil(status.accounts.first?.accessTokenExpiresAt)
        XCTAssertNil(status.accounts.first?.accessTokenExpiresIn)
        _ = try await broker.logout(account: "work")
        XCTAssertEqual(http.revokePosts.first?["token"], "gho_x", "revoked as the access token it is")
        XCTAssertEqual(http.revokePosts.first?["token_type_hint"], "access_token")
    }

    func testHTMLIsStillNotAForm() {
        XCTAssertEqual(TokenResponseParser.jsonBody(Array("<html><a href=x>".utf8)), Array("<html><a href=x>".utf8))
        XCTAssertThrowsError(try TokenResponseParser.parse(reply("<html><body a=b>hi</body></html>"), receivedAt: now)) {
            XCTAssertEqual(($0 as? AuthError)?.code, .invalidTokenResponse)
        }
    }
}
