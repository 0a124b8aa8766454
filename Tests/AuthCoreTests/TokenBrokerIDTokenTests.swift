import AuthTestSupport
@testable import AuthCore
import Foundation
import XCTest

/// The broker's use of ``IDTokenVerifier``: the per-account JWKS cache, the rule without `jwks_uri`, and ID tokens
/// that arrive with a refresh (OIDC Core §12.2).
final class TokenBrokerIDTokenTests: XCTestCase {
    let key = SecretKey(Fixtures.account())

    /// Signs in through the fake browser; `idToken` builds the token from the request's nonce.
    func signIn(_ broker: TokenBroker, _ http: FakeHTTP, _ redirects: FakeRedirects, _ browser: FakeBrowser,
                idToken: (String) async -> String) async throws -> LoginOutcome {
        let ticket = try await broker.beginLogin(account: "work")
        let state = try XCTUnwrap(browser.lastQuery["state"]?.first)
        let nonce = try XCTUnwrap(browser.lastQuery["nonce"]?.first)
        http.tokenReplies = [FakeHTTP.tokenReply(access: "at-1", refresh: "rt-1", idToken: await idToken(nonce))]
        XCTAssertEqual(redirects.deliver("code=c&state=\(state)"), .success)
        return try await broker.awaitLogin(ticket)
    }

    func testSigningKeysAreCachedPerAccountWithAMaxAge() async throws {
        let (http, redirects, browser, clock) = (FakeHTTP(), FakeRedirects(), FakeBrowser(), ManualClock())
        let broker = Fixtures.broker(http: http, redirects: redirects, browser: browser, clock: clock)
        let first = try await signIn(broker, http, redirects, browser) { await Fixtures.signedIDToken(nonce: $0) }
        XCTAssertEqual(first.subject, "alice")
        _ = try await signIn(broker, http, redirects, browser) { await Fixtures.signedIDToken(nonce: $0) }
        XCTAssertEqual(http.jwksFetches, 1, "the second sign-in uses the cached keys")
        clock.advance(ProviderDirectory.signingKeysMaxAge + .seconds(1))
        _ = try await signIn(broker, http, redirects, browser) { await Fixtures.signedIDToken(nonce: $0) }
        XCTAssertEqual(http.jwksFetches, 2, "keys older than the max age are fetched again")
    }

    /// Waits (bounded) until the fake server has seen `count` JWKS requests.
    func waitForJWKSFetches(_ http: FakeHTTP, _ count: Int) async throws {
        for _ in 0..<500 where http.jwksFetches < count { try await Task.sleep(for: .milliseconds(10)) }
        XCTAssertEqual(http.jwksFetches, count, "the JWKS was fetched while the sign-in waited for its redirect")
    }

    func testSigningKeysAreFetchedWhileThePersonSignsInNotAfter() async throws {
        let (http, redirects, browser) = (FakeHTTP(), FakeRedirects(), FakeBrowser())
        let broker = Fixtures.broker(http: http, redirects: redirects, browser: browser)
        let ticket = try await broker.beginLogin(account: "work")
        try await waitForJWKSFetches(http, 1)
        let nonce = try XCTUnwrap(browser.lastQuery["nonce"]?.first)
        http.tokenReplies = [FakeHTTP.tokenReply(access: "at-1", refresh: "rt-1", idToken: await Fixtures.signedIDToken(nonce: nonce))]
        XCTAssertEqual(redirects.deliver("code=c&state=\(try XCTUnwrap(browser.lastQuery["state"]?.first))"), .success)
        let outcome = try await broker.awaitLogin(ticket)
        XCTAssertEqual(outcome.subject, "alice")
        XCTAssertEqual(http.jwksFetches, 1, "the ID token was checked with the keys fetched during the wait")
    }

    func testAFailedPrefetchIsFetchedAgainByTheCheck() async throws {
        let (http, redirects, browser) = (FakeHTTP(), FakeRedirects(), FakeBrowser())
        let broker = Fixtures.broker(http: http, redirects: redirects, browser: browser)
        let good = try XCTUnwrap(http.discovery["https://issuer.example/jwks"])
        http.discovery["https://issuer.example/jwks"] = HTTPReply(status: 503, body: [])
        let ticket = try await broker.beginLogin(account: "work")
        try await waitForJWKSFetches(http, 1)
        http.discovery["https://issuer.example/jwks"] = good
        let nonce = try XCTUnwrap(browser.lastQuery["nonce"]?.first)
        http.tokenReplies = [FakeHTTP.tokenReply(access: "at-1", refresh: "rt-1", idToken: await Fixtures.signedIDToken(nonce: nonce))]
        XCTAssertEqual(redirects.deliver("code=c&state=\(try XCTUnwrap(browser.lastQuery["state"]?.first))"), .success)
        let outcome = try await broker.awaitLogin(ticket)
        XCTAssertEqual(outcome.subject, "alice", "the prefetch's 503 did not fail the sign-in")
        XCTAssertEqual(http.jwksFetches, 2)
    }

    func testUnknownKidRefetchesOnceThenFailsTheSignIn() async throws {
        let (store, http, redirects, browser) = (MemorySecretStore(), FakeHTTP(), FakeRedirects(), FakeBrowser())
        let broker = Fixtures.broker(store: store, http: http, redirects: redirects, browser: browser)
        do {
            _ = try await signIn(broker, http, redirects, browser) { await TestKeys.sign(.init(nonce: $0), kid: "gone") }
            XCTFail("signed in with a token from an unknown key")
        } catch {
            XCTAssertEqual((error as? AuthError)?.code, .invalidIDToken)
        }
        XCTAssertEqual(http.jwksFetches, 2, "fetched, then refetched once")
        let stored = await store.items[key]
        XCTAssertNil(stored, "nothing is stored from a rejected sign-in")
    }

    func testOpenIDWithoutJWKSURIFailsTheSignIn() async throws {
        let (store, http, redirects, browser) = (MemorySecretStore(), FakeHTTP(), FakeRedirects(), FakeBrowser())
        let broker = Fixtures.broker(store: store, http: http, redirects: redirects, browser: browser)
        let withoutJWKS = String(decoding: Fixtures.discoveryBody, as: UTF8.self)
            .replacingOccurrences(of: #""jwks_uri":"https://issuer.example/jwks","#, with: "")
        http.discovery["https://issuer.example/.well-known/openid-configuration"] = HTTPReply(status: 200, body: Array(withoutJWKS.utf8))
        do {
            _ = try await signIn(broker, http, redirects, browser) { await Fixtures.signedIDToken(nonce: $0) }
            XCTFail("signed in although the ID token's signature could not be checked")
        } catch {
            XCTAssertEqual((error as? AuthError)?.code, .invalidIDToken)
            XCTAssertTrue("\(error)".contains("jwks_uri"), "\(error)")
        }
        let stored = await store.items[key]
        XCTAssertNil(stored)
    }

    func testConfiguredJWKSURIIsUsedWithoutDiscovery() async throws {
        var account = Fixtures.account()
        account.authorizationEndpoint = URL(string: "https://issuer.example/authorize")
        account.tokenEndpoint = URL(string: "https://issuer.example/token")
        account.revocationEndpoint = URL(string: "https://issuer.example/revoke")
        account.jwksURI = URL(string: "https://issuer.example/jwks")
        let (http, redirects, browser) = (FakeHTTP(), FakeRedirects(), FakeBrowser())
        let broker = Fixtures.broker(accounts: [account], http: http, redirects: redirects, browser: browser)
        let outcome = try await signIn(broker, http, redirects, browser) { await Fixtures.signedIDToken(nonce: $0) }
        XCTAssertEqual(outcome.subject, "alice")
        XCTAssertEqual(http.gets.map(\.path), ["/jwks"], "no discovery needed")
    }

    func testRefreshedIDTokenIsVerifiedAndBoundToTheSignIn() async throws {
        let (store, http, redirects, browser) = (MemorySecretStore(), FakeHTTP(), FakeRedirects(), FakeBrowser())
        let broker = Fixtures.broker(store: store, http: http, redirects: redirects, browser: browser)
        _ = try await signIn(broker, http, redirects, browser) { await Fixtures.signedIDToken(nonce: $0) }

        let refreshed = await TestKeys.sign(.init(iat: 1_800_000_050))
        http.tokenReplies = [FakeHTTP.tokenReply(access: "at-2", refresh: "rt-2", idToken: refreshed)]
        let grant = try await broker.accessToken(account: "work", forceRefresh: true)
        XCTAssertEqual(grant.idToken?.reveal(), refreshed, "a good refreshed ID token (no nonce) replaces the old one")

        http.tokenReplies = [FakeHTTP.tokenReply(access: "at-3", refresh: "rt-3", idToken: await Fixtures.signedIDToken(nonce: nil, sub: "mallory"))]
        do {
            _ = try await broker.accessToken(account: "work", forceRefresh: true)
            XCTFail("accepted a refreshed ID token for another user")
        } catch {
            XCTAssertEqual((error as? AuthError)?.code, .invalidIDToken)
        }
        let stored = try await storedCredential(store)
        XCTAssertEqual(stored.refreshToken?.reveal(), "rt-3", "the rotated refresh token is kept even when its ID token is refused")
        http.tokenReplies = [FakeHTTP.tokenReply(access: "at-4", refresh: "rt-4",
                                                 idToken: await TestKeys.sign(.init(), rsaKey: TestKeys.otherRSA))]
        do {
            _ = try await broker.accessToken(account: "work", forceRefresh: true)
            XCTFail("accepted a refreshed ID token with a bad signature")
        } catch {
            XCTAssertEqual((error as? AuthError)?.code, .invalidIDToken)
        }
    }

    /// The credential in the store's item for the account.
    func storedCredential(_ store: MemorySecretStore) async throws -> StoredCredential {
        let stored = await store.items[key]
        return try StoredCredential(stored: XCTUnwrap(stored))
    }

    /// OIDC Core §12.2 across a restart: the sign-in's claims are kept with the credential in the keyring, so a broker
    /// started anew over the same store (nothing in memory) compares a refreshed ID token with them. Every refusal
    /// rotates the refresh token, whose new item keeps them; an accepted refreshed token does not replace them.
    func testRefreshedIDTokenIsComparedWithTheSignInsAfterARestart() async throws {
        let (store, http, redirects, browser) = (MemorySecretStore(), FakeHTTP(), FakeRedirects(), FakeBrowser())
        let signedIn = Fixtures.broker(store: store, http: http, redirects: redirects, browser: browser)
        _ = try await signIn(signedIn, http, redirects, browser) { await TestKeys.sign(.init(nonce: $0, auth_time: 1_799_999_000)) }
        let refused: [(String, TestKeys.Claims)] = [
            ("another issuer, subject or audience", .init(sub: "mallory", auth_time: 1_799_999_000)),
            ("another issuer, subject or audience", .init(aud: ["client-1", "other"], azp: "client-1", auth_time: 1_799_999_000)),
            ("another issuer, subject or audience", .init(iss: "https://issuer.example/", auth_time: 1_799_999_000)),
            ("auth_time is earlier", .init(auth_time: 1_799_998_000)),
        ]
        for (n, (reason, claims)) in refused.enumerated() {
            let restarted = Fixtures.broker(store: store, http: http)
            http.tokenReplies = [FakeHTTP.tokenReply(access: "at-\(n)", refresh: "rt-\(n)", idToken: await TestKeys.sign(claims))]
            do {
                _ = try await restarted.accessToken(account: "work", forceRefresh: true)
                XCTFail("after a restart, accepted a refreshed ID token with \(reason)")
            } catch {
                XCTAssertEqual(error.code, .invalidIDToken, "\(error)")
                XCTAssertTrue(error.message.contains(reason), "\(error)")
            }
            let item = try await storedCredential(store)
            XCTAssertEqual(item.refreshToken?.reveal(), "rt-\(n)", "the rotated refresh token is kept")
            XCTAssertEqual(item.signInClaims?.subject, "alice", "the rotated item keeps the sign-in's claims")
        }

        // The same user, without auth_time (sent at the sign-in only): accepted, and the reference stays the sign-in's.
        let same = await TestKeys.sign(.init(iat: 1_800_000_050))
        http.tokenReplies = [FakeHTTP.tokenReply(access: "at-ok", refresh: "rt-ok", idToken: same)]
        let grant = try await Fixtures.broker(store: store, http: http).accessToken(account: "work", forceRefresh: true)
        XCTAssertEqual(grant.idToken?.reveal(), same)
        let item = try await storedCredential(store)
        XCTAssertEqual(item.signInClaims?.authTime, 1_799_999_000, "the sign-in's claims, not the refreshed token's")
        // A later auth_time (the person authenticated again at the provider) is accepted, and still does not become
        // the reference: an earlier one than the sign-in's is refused after it.
        http.tokenReplies = [FakeHTTP.tokenReply(access: "at-late", refresh: "rt-late",
                                                 idToken: await TestKeys.sign(.init(auth_time: 1_800_000_060)))]
        _ = try await Fixtures.broker(store: store, http: http).accessToken(account: "work", forceRefresh: true)
        let after = try await storedCredential(store)
        XCTAssertEqual(after.signInClaims?.authTime, 1_799_999_000)
        http.tokenReplies = [FakeHTTP.tokenReply(access: "at-early", refresh: "rt-early",
                                                 idToken: await TestKeys.sign(.init(auth_time: 1_799_998_999)))]
        await assertThrows(.invalidIDToken) {
            _ = try await Fixtures.broker(store: store, http: http).accessToken(account: "work", forceRefresh: true)
        }
    }

    /// An item written before the sign-in's claims were kept (the bare refresh token) still refreshes. With nothing to
    /// compare it with, the first refreshed ID token is accepted and its claims are kept with the credential, so after
    /// a restart the next one is compared with them.
    func testAnItemWithoutClaimsRefreshesAndKeepsTheFirstRefreshedClaims() async throws {
        let (store, http) = (MemorySecretStore(items: [key: Secret("rt-old")]), FakeHTTP())
        let broker = Fixtures.broker(store: store, http: http)
        http.tokenReplies = [FakeHTTP.tokenReply(access: "at-1")]
        let plain = try await broker.accessToken(account: "work", forceRefresh: true)
        XCTAssertEqual(plain.accessToken.reveal(), "at-1")
        let stored = await store.items[key]
        XCTAssertEqual(stored?.reveal(), "rt-old", "no ID token, nothing to keep: the item is as it was")

        let first = await TestKeys.sign(.init(iat: 1_800_000_050, auth_time: 1_799_999_000))
        http.tokenReplies = [FakeHTTP.tokenReply(access: "at-2", idToken: first)]
        let grant = try await broker.accessToken(account: "work", forceRefresh: true)
        XCTAssertEqual(grant.idToken?.reveal(), first, "nothing to compare with: accepted")
        let item = try await storedCredential(store)
        XCTAssertEqual(item.refreshToken?.reveal(), "rt-old")
        XCTAssertEqual(item.signInClaims, IDTokenClaims(issuer: "https://issuer.example", subject: "alice", audiences: ["client-1"],
                                                        authTime: 1_799_999_000))

        http.tokenReplies = [FakeHTTP.tokenReply(access: "at-3", idToken: await Fixtures.signedIDToken(nonce: nil, sub: "mallory"))]
        await assertThrows(.invalidIDToken) {
            _ = try await Fixtures.broker(store: store, http: http).accessToken(account: "work", forceRefresh: true)
        }
    }
}
