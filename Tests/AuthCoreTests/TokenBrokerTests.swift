import AuthTestSupport
@testable import AuthCore
import Foundation
import Logging
import XCTest

final class TokenBrokerTests: XCTestCase {
    let key = SecretKey(Fixtures.account())

    func testServesCacheUntilStaleThenRefreshesWithRotation() async throws {
        let store = MemorySecretStore(items: [key: Secret("rt-1")])
        let http = FakeHTTP()
        let clock = ManualClock()
        http.tokenReplies = [FakeHTTP.tokenReply(access: "at-1", refresh: "rt-2", expiresIn: 3600),
                             FakeHTTP.tokenReply(access: "at-2", refresh: "rt-3", expiresIn: 3600)]
        let broker = Fixtures.broker(store: store, http: http, clock: clock)

        let first = try await broker.accessToken(account: "work")
        XCTAssertEqual(first.accessToken.reveal(), "at-1")
        let stored = await store.items[key]
        XCTAssertEqual(stored?.reveal(), "rt-2", "rotated refresh token is in the store")
        XCTAssertEqual(http.tokenPosts.first?["refresh_token"], "rt-1")
        XCTAssertEqual(http.tokenPosts.first?["client_id"], "client-1")

        clock.advance(.seconds(1800))
        let cached = try await broker.accessToken(account: "work")
        XCTAssertEqual(cached.accessToken.reveal(), "at-1")
        XCTAssertEqual(http.tokenPosts.count, 1, "a fresh cached token needs no request")

        let longer = try await broker.accessToken(account: "work", minValid: .seconds(1900))
        XCTAssertEqual(longer.accessToken.reveal(), "at-2", "min_valid beyond the cached expiry forces a refresh")
        XCTAssertEqual(http.tokenPosts.last?["refresh_token"], "rt-2")
        let final = await store.items[key]
        XCTAssertEqual(final?.reveal(), "rt-3")
    }

    func testKeepsRefreshTokenWhenServerDoesNotRotate() async throws {
        let store = MemorySecretStore(items: [key: Secret("rt-1")])
        let http = FakeHTTP()
        http.tokenReplies = [FakeHTTP.tokenReply(access: "at-1", refresh: nil)]
        let broker = Fixtures.broker(store: store, http: http)
        _ = try await broker.accessToken(account: "work")
        let stored = await store.items[key]
        XCTAssertEqual(stored?.reveal(), "rt-1")
    }

    func testSingleFlight() async throws {
        let store = MemorySecretStore(items: [key: Secret("rt-1")])
        let http = FakeHTTP()
        http.tokenDelay = .milliseconds(200)
        http.tokenReplies = [FakeHTTP.tokenReply(access: "at-1", refresh: "rt-2")]
        let broker = Fixtures.broker(store: store, http: http)
        let tokens = try await withThrowingTaskGroup(of: String.self) { group in
            for _ in 0..<200 { group.addTask { try await broker.accessToken(account: "work").accessToken.reveal() } }
            return try await group.reduce(into: [String]()) { $0.append($1) }
        }
        XCTAssertEqual(tokens.count, 200)
        XCTAssertEqual(Set(tokens), ["at-1"])
        XCTAssertEqual(http.tokenPosts.count, 1, "200 concurrent callers share one refresh")
    }

    func testInvalidGrantDeletesOnlyTheTokenThatWasSent() async throws {
        let store = MemorySecretStore(items: [key: Secret("rt-1")])
        let http = FakeHTTP()
        http.tokenReplies = [FakeHTTP.errorReply(400, "invalid_grant")]
        let broker = Fixtures.broker(store: store, http: http)
        await assertThrows(.loginRequired) { _ = try await broker.accessToken(account: "work") }
        let afterDelete = await store.items[key]
        XCTAssertNil(afterDelete)
        let status = await broker.status()
        XCTAssertEqual(status.accounts.first?.hasRefreshToken, false)
        XCTAssertEqual(status.accounts.first?.lastError?.code, .loginRequired)
    }

    func testServerErrorsKeepTheRefreshToken() async throws {
        for reply in [FakeHTTP.errorReply(500, "server_error"), HTTPReply(status: 429, body: [], retryAfter: "7"),
                      HTTPReply(status: 200, body: Array("<html>".utf8)), FakeHTTP.errorReply(401, "invalid_client")] {
            let store = MemorySecretStore(items: [key: Secret("rt-1")])
            let http = FakeHTTP()
            http.tokenReplies = [reply]
            let broker = Fixtures.broker(store: store, http: http)
            do {
                _ = try await broker.accessToken(account: "work")
                XCTFail("expected failure for HTTP \(reply.status)")
            } catch {
                XCTAssertNotEqual(error.code, .loginRequired)
            }
            let kept = await store.items[key]
            XCTAssertEqual(kept?.reveal(), "rt-1", "HTTP \(reply.status) must not lose the refresh token")
        }
    }

    func testLockedKeyringIsNotReportedAsSignedOut() async throws {
        let store = MemorySecretStore()
        await store.setState(.locked)
        let broker = Fixtures.broker(store: store)
        await assertThrows(.keyringLocked) { _ = try await broker.accessToken(account: "work") }
        let status = await broker.status()
        XCTAssertEqual(status.keyring, .locked)
        XCTAssertNil(status.accounts.first?.hasRefreshToken, "locked keyring: sign-in state unknown, not 'signed out'")
    }

    /// Issue 36: a sign-in whose refresh token could not be stored is refused before anyone is sent to sign in,
    /// in the words of the store (KeePassXC's here), for the redirect and the device grant alike; it is not counted
    /// as a failed sign-in.
    func testSignInWithALockedStoreIsRefusedBeforeTheBrowserOrTheServer() async throws {
        let store = LockedKeePassXCStore()
        let http = FakeHTTP()
        let redirects = FakeRedirects()
        let browser = FakeBrowser()
        let broker = TokenBroker(accounts: [Fixtures.account()], store: store, http: http, redirects: redirects,
                                 browser: browser, time: ManualClock(), logger: Logger(label: "test"))
        for method in [LoginMethod.redirect, .device] {
            do {
                _ = try await broker.beginLogin(account: "work", method: method)
                XCTFail("a sign-in began with the store locked (\(method))")
            } catch {
                XCTAssertEqual(error.code, .keyringLocked)
                XCTAssertEqual(error.message, "the KeePassXC database is locked: unlock the database in KeePassXC and try again")
                XCTAssertEqual(error.keyringService, "/usr/bin/keepassxc")
                XCTAssertEqual(error.keyringAdvice, "unlock the database in KeePassXC", "the store's advice goes with it")
            }
        }
        XCTAssertTrue(browser.opened.isEmpty, "the browser was started")
        XCTAssertEqual(redirects.opened, 0, "the redirect listener was opened")
        XCTAssertTrue(http.tokenPosts.isEmpty)
        let status = await broker.status()
        XCTAssertEqual(status.accounts.first?.loginPending, false)
        XCTAssertEqual(status.keyringService?.program, "/usr/bin/keepassxc")
    }

    func testLogoutWithLockedKeyringSaysLockedAndKeepsTheToken() async throws {
        let store = MemorySecretStore(items: [key: Secret("rt-1")])
        await store.setState(.locked)
        let http = FakeHTTP()
        let broker = Fixtures.broker(store: store, http: http)
        await assertThrows(.keyringLocked) { _ = try await broker.logout(account: "work") }
        XCTAssertTrue(http.revokePosts.isEmpty)
        await store.setState(.available)
        let kept = await store.items[key]
        XCTAssertEqual(kept?.reveal(), "rt-1", "nothing was deleted behind the user's back")
        let outcome = try await broker.logout(account: "work")
        XCTAssertEqual(outcome.revoked, true, "after unlocking, logout works")
    }

    func testNoRefreshTokenMeansLoginRequired() async throws {
        let broker = Fixtures.broker()
        await assertThrows(.loginRequired) { _ = try await broker.accessToken(account: "work") }
        await assertThrows(.unknownAccount) { _ = try await broker.accessToken(account: "nope") }
    }

    func testFullLoginStoresRefreshTokenAndCachesAccessToken() async throws {
        let store = MemorySecretStore()
        let http = FakeHTTP()
        let redirects = FakeRedirects()
        let browser = FakeBrowser()
        let broker = Fixtures.broker(store: store, http: http, redirects: redirects, browser: browser)
        let ticket = try await broker.beginLogin(account: "work")
        XCTAssertTrue(ticket.browserOpened)
        XCTAssertEqual(ticket.redirectURI, "http://127.0.0.1:50000/oauth2/callback/work")
        let query = browser.lastQuery
        let state = try XCTUnwrap(query["state"]?.first)
        let nonce = try XCTUnwrap(query["nonce"]?.first)
        http.tokenReplies = [FakeHTTP.tokenReply(access: "at-1", refresh: "rt-1", idToken: await Fixtures.signedIDToken(nonce: nonce))]

        XCTAssertEqual(redirects.deliver("code=c&state=forged"), .invalid, "a wrong state is rejected")
        XCTAssertEqual(redirects.deliver("code=the-code&state=\(state)"), .success)
        XCTAssertEqual(redirects.deliver("code=the-code&state=\(state)"), .invalid, "a replayed response is rejected")

        let outcome = try await broker.awaitLogin(ticket)
        XCTAssertEqual(outcome.email, "alice@example.test")
        XCTAssertTrue(outcome.hasRefreshToken)
        let exchanged = try XCTUnwrap(http.tokenPosts.first)
        XCTAssertEqual(exchanged["grant_type"], "authorization_code")
        XCTAssertEqual(exchanged["code"], "the-code")
        XCTAssertEqual(exchanged["redirect_uri"], "http://127.0.0.1:50000/oauth2/callback/work")
        XCTAssertEqual(PKCE.challenge(for: try XCTUnwrap(exchanged["code_verifier"])), query["code_challenge"]?.first)
        let storedSecret = await store.items[key]
        let stored = try StoredCredential(stored: XCTUnwrap(storedSecret))
        XCTAssertEqual(stored.refreshToken?.reveal(), "rt-1")
        XCTAssertEqual(stored.signInClaims?.subject, "alice", "the ID token's claims are kept with it (OIDC Core §12.2)")
        XCTAssertNil(stored.signInClaims?.email, "the profile claims are not")
        XCTAssertEqual(redirects.closed, 1, "listener closed after the first valid response")
        let token = try await broker.accessToken(account: "work")
        XCTAssertEqual(token.accessToken.reveal(), "at-1")
        XCTAssertEqual(http.tokenPosts.count, 1)
    }

    func testLoginRejectsIDTokenWithWrongNonce() async throws {
        let store = MemorySecretStore()
        let http = FakeHTTP()
        let redirects = FakeRedirects()
        let browser = FakeBrowser()
        let broker = Fixtures.broker(store: store, http: http, redirects: redirects, browser: browser)
        let ticket = try await broker.beginLogin(account: "work")
        let state = try XCTUnwrap(browser.lastQuery["state"]?.first)
        http.tokenReplies = [FakeHTTP.tokenReply(access: "at-1", refresh: "rt-1", idToken: await Fixtures.signedIDToken(nonce: "replayed"))]
        _ = redirects.deliver("code=the-code&state=\(state)")
        await assertThrows(.invalidIDToken) { _ = try await broker.awaitLogin(ticket) }
        let stored = await store.items[key]
        XCTAssertNil(stored, "nothing is stored from a rejected sign-in")
    }

    func testDeniedLoginAndSharedWaiters() async throws {
        let redirects = FakeRedirects()
        let browser = FakeBrowser()
        let broker = Fixtures.broker(redirects: redirects, browser: browser)
        let first = try await broker.beginLogin(account: "work")
        let second = try await broker.beginLogin(account: "work")
        XCTAssertEqual(first.authorizationURL, second.authorizationURL, "a second caller joins the pending sign-in")
        XCTAssertEqual(browser.opened.count, 1, "only one browser tab")
        let state = try XCTUnwrap(browser.lastQuery["state"]?.first)
        XCTAssertEqual(redirects.deliver("error=access_denied&state=\(state)"), .denied)
        await assertThrows(.accessDenied) { _ = try await broker.awaitLogin(first) }
    }

    func testLoginTimesOutAndBrowserFailureStillGivesURL() async throws {
        let browser = FakeBrowser()
        browser.fails = true
        var account = Fixtures.account()
        account.loginTimeout = .seconds(300)
        let clock = ManualClock()
        let broker = Fixtures.broker(accounts: [account], browser: browser, clock: clock)
        let ticket = try await broker.beginLogin(account: "work")
        XCTAssertFalse(ticket.browserOpened)
        XCTAssertNotNil(ticket.browserError)
        XCTAssertTrue(ticket.authorizationURL.absoluteString.hasPrefix("https://issuer.example/authorize?"))
        let waiting = Task { try await broker.awaitLogin(ticket) }
        let sleeping = await clock.waitForSleepers(1)
        XCTAssertTrue(sleeping, "the sign-in's timeout is not on the broker's clock")
        clock.advance(.seconds(299))
        XCTAssertEqual(clock.sleepers, 1, "timed out early")
        clock.advance(.seconds(1))
        await assertThrows(.loginTimeout) { _ = try await waiting.value }
        let status = await broker.status()
        XCTAssertFalse(status.accounts[0].loginPending)
    }

    func testLastWaiterLeavingCancelsLogin() async throws {
        let redirects = FakeRedirects()
        let broker = Fixtures.broker(redirects: redirects)
        let ticket = try await broker.beginLogin(account: "work")
        let waiter = Task { try await broker.awaitLogin(ticket) }
        try await Task.sleep(for: .milliseconds(50))
        waiter.cancel()
        do {
            _ = try await waiter.value
            XCTFail("expected cancellation")
        } catch {
            XCTAssertEqual((error as? AuthError)?.code, .loginCancelled)
        }
        for _ in 0..<50 where redirects.closed == 0 { try await Task.sleep(for: .milliseconds(10)) }
        XCTAssertEqual(redirects.closed, 1, "the listener closes when nobody waits")
    }

    func testLogoutRevokesAndDeletes() async throws {
        let store = MemorySecretStore(items: [key: Secret("rt-1")])
        let http = FakeHTTP()
        let broker = Fixtures.broker(store: store, http: http)
        let outcome = try await broker.logout(account: "work")
        XCTAssertEqual(outcome.revoked, true)
        XCTAssertEqual(http.revokePosts.first?["token"], "rt-1")
        XCTAssertEqual(http.revokePosts.first?["token_type_hint"], "refresh_token")
        let gone = await store.items[key]
        XCTAssertNil(gone)

        // Revocation failure: still deleted locally, failure reported.
        let store2 = MemorySecretStore(items: [key: Secret("rt-1")])
        let http2 = FakeHTTP()
        http2.revocationStatus = 503
        let outcome2 = try await Fixtures.broker(store: store2, http: http2).logout(account: "work")
        XCTAssertEqual(outcome2.revoked, false)
        XCTAssertNotNil(outcome2.revocationError)
        let gone2 = await store2.items[key]
        XCTAssertNil(gone2)
    }

    func testExplicitEndpointsSurviveAnUntrustworthyDiscoveryDocument() async throws {
        var account = Fixtures.account()
        account.authorizationEndpoint = URL(string: "https://issuer.example/authorize")
        account.tokenEndpoint = URL(string: "https://issuer.example/token")
        let store = MemorySecretStore(items: [key: Secret("rt-1")])
        let http = FakeHTTP()
        http.tokenReplies = [FakeHTTP.tokenReply(access: "at")]
        let broker = Fixtures.broker(accounts: [account], store: store, http: http)
        // A templated issuer, as Microsoft's /common/v2.0 document has: not equal to the configured one.
        http.discovery["https://issuer.example/.well-known/openid-configuration"] = HTTPReply(status: 200, body: Array(
            #"{"issuer":"https://issuer.example/{tenantid}","authorization_endpoint":"https://x.example/a","token_endpoint":"https://x.example/t"}"#.utf8))
        let token = try await broker.accessToken(account: "work")
        XCTAssertEqual(token.accessToken.reveal(), "at")
        XCTAssertEqual(http.tokenPosts.count, 1)

        // Without explicit endpoints the same document is an error.
        let bad = http.discovery["https://issuer.example/.well-known/openid-configuration"]
        let strict = Fixtures.broker(store: MemorySecretStore(items: [key: Secret("rt-1")]), http: http)
        http.discovery["https://issuer.example/.well-known/openid-configuration"] = bad
        await assertThrows(.issuerMismatch) { _ = try await strict.accessToken(account: "work") }
    }

    func testConfidentialClientUsesBasicAuth() async throws {
        let account = Fixtures.account(secret: "s3cret")
        let store = MemorySecretStore(items: [SecretKey(account): Secret("rt-1")])
        let http = FakeHTTP()
        http.tokenReplies = [FakeHTTP.tokenReply(access: "at")]
        _ = try await Fixtures.broker(accounts: [account], store: store, http: http).accessToken(account: "work")
        XCTAssertNil(http.tokenPosts.first?["client_secret"])
        XCTAssertNil(http.tokenPosts.first?["client_id"])
    }
}

extension TokenBrokerTests {
    /// A browser can finish before the caller gets to `awaitLogin`: the caller must still get that sign-in's own
    /// result (who signed in), not a reconstruction from the cache.
    func testSignInThatEndsBeforeAwaitStillReportsItsOutcome() async throws {
        let (http, redirects, browser) = (FakeHTTP(), FakeRedirects(), FakeBrowser())
        let broker = Fixtures.broker(http: http, redirects: redirects, browser: browser)
        let ticket = try await broker.beginLogin(account: "work")
        let state = try XCTUnwrap(browser.lastQuery["state"]?.first)
        let nonce = try XCTUnwrap(browser.lastQuery["nonce"]?.first)
        http.tokenReplies = [FakeHTTP.tokenReply(access: "at-1", refresh: "rt-1", idToken: await Fixtures.signedIDToken(nonce: nonce))]
        XCTAssertEqual(redirects.deliver("code=c&state=\(state)"), .success)
        for _ in 0..<200 {
            if await broker.status().accounts[0].loginPending == false { break }
            try await Task.sleep(for: .milliseconds(5))
        }
        let pending = await broker.status().accounts[0].loginPending
        XCTAssertFalse(pending, "the sign-in ended before anyone awaited it")
        let outcome = try await broker.awaitLogin(ticket)
        XCTAssertEqual(outcome.subject, "alice")
        XCTAssertEqual(outcome.email, "alice@example.test")
    }
}

/// A store locked the way KeePassXC is, naming KeePassXC as the Secret Service.
private actor LockedKeePassXCStore: SecretStore {
    func loadItem(_ key: SecretKey) throws(AuthError) -> KeyringItem? { nil }
    func storedKeys() throws(AuthError) -> Set<SecretKey> { [] }
    func store(_ item: KeyringItem, for key: SecretKey) throws(AuthError) { throw lockedError() }
    func delete(_ key: SecretKey) throws(AuthError) -> Bool { throw lockedError() }
    func state() -> KeyringState { .locked }
    func service() -> KeyringService? {
        KeyringService(program: "/usr/bin/keepassxc", unlock: "unlock the database in KeePassXC")
    }
    func lockedError() -> AuthError {
        AuthError.keyringLocked(service(), "the KeePassXC database is locked: unlock the database in KeePassXC and try again")
    }
}
