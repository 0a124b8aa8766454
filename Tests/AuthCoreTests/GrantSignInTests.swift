import AuthTestSupport
@testable import AuthCore
import Foundation
import XCTest

/// A grant's sign-in of its own (``GrantSignIn``): how a grant narrows an account, and the sign-in's life in the
/// broker (found again, kept across a reload that keeps its account, signed out and forgotten with the grant).
final class GrantSignInTests: XCTestCase {
    func testAnAccountNarrowsByRefreshOnlyWhereItsServerKeepsTheScope() async throws {
        var scoped = Fixtures.account("scoped", scopes: ["openid", "email"])
        scoped.scopedTokens = true
        let broker = Fixtures.broker(accounts: [Fixtures.account(scopes: ["openid", "email"]), scoped])
        var narrowing = try await broker.narrowing(account: "scoped", scopes: ["openid"], resource: nil)
        XCTAssertEqual(narrowing, .byRefresh)
        narrowing = try await broker.narrowing(account: "work", scopes: ["openid"], resource: nil)
        XCTAssertEqual(narrowing, .ownSignIn, "its server would narrow the account's own sign-in")
        narrowing = try await broker.narrowing(account: "work", scopes: ["email", "openid"], resource: nil)
        XCTAssertEqual(narrowing, .byRefresh, "all of its scopes is the account's own token")
        await assertThrows(.invalidScope) { _ = try await broker.narrowing(account: "work", scopes: ["admin"], resource: nil) }
        await assertThrows(.invalidTarget) {
            _ = try await broker.narrowing(account: "work", scopes: nil, resource: "https://api.example")
        }
        narrowing = try await broker.narrowing(account: "scoped", scopes: nil, resource: "https://api.example")
        XCTAssertEqual(narrowing, .byRefresh)
    }

    func testItsNameIsNoAccountNameAConfigurationCanGive() {
        let signIn = GrantSignIn(grant: "ci", account: "work", scopes: ["openid"])
        XCTAssertEqual(signIn.name, "work@grant:ci")
        XCTAssertTrue(GrantSignIn.isGrantSignIn(signIn.name))
        XCTAssertFalse(AccountConfig.isValidName(signIn.name))
        XCTAssertFalse(GrantSignIn.isGrantSignIn("work"))
    }

    func testItFollowsItsAccountThroughAReloadAndEndsSignedOutAndForgotten() async throws {
        let signIn = GrantSignIn(grant: "ci", account: "work", scopes: ["openid"])
        var items: [SecretKey: Secret] = [:]
        var own = Fixtures.account(scopes: ["openid"])
        own.name = signIn.name
        items[SecretKey(own)] = Secret("rt-own")
        let http = FakeHTTP()
        http.tokenReplies = (1...4).map { FakeHTTP.tokenReply(access: "at-\($0)", refresh: nil, expiresIn: 3600) }
        let store = MemorySecretStore(items: items)
        let broker = Fixtures.broker(store: store, http: http)
        try await broker.addGrantSignIn(signIn)
        try await broker.addGrantSignIn(signIn)  // again (a restart's first request): one account
        var names = await broker.accountOrder
        XCTAssertEqual(names, ["work", signIn.name])
        let configured = await broker.accountNames
        XCTAssertEqual(configured, ["work"], "not a configured account: no request names it, no grant is made of it")
        let token = try await broker.accessToken(account: signIn.name)
        XCTAssertEqual(token.accessToken.reveal(), "at-1")
        XCTAssertEqual(http.tokenPosts.last?["refresh_token"], "rt-own", "from its own refresh token")
        XCTAssertEqual(http.tokenPosts.last?["scope"], "openid", "with the grant's scopes")

        _ = await broker.reconfigure([Fixtures.account(scopes: ["openid", "email"]), Fixtures.account("home")])
        names = await broker.accountOrder
        XCTAssertEqual(names, ["work", "home", signIn.name], "kept while its account is")
        _ = await broker.reconfigure([Fixtures.account("home")])
        names = await broker.accountOrder
        XCTAssertEqual(names, ["home"], "gone from memory with its account")

        _ = await broker.reconfigure([Fixtures.account(), Fixtures.account("home")])
        names = await broker.accountOrder
        XCTAssertEqual(names, ["work", "home", signIn.name], "back with it")
        let outcome = await broker.endGrantSignIn(signIn)
        XCTAssertEqual(outcome?.hadRefreshToken, true)
        names = await broker.accountOrder
        XCTAssertEqual(names, ["work", "home"])
        let stored = try await broker.loadRefreshToken(SecretKey(own))
        XCTAssertNil(stored, "deleted from the keyring")
        _ = await broker.reconfigure([Fixtures.account(), Fixtures.account("home")])
        names = await broker.accountOrder
        XCTAssertEqual(names, ["work", "home"], "and not made again by a reload")
    }

    func testWithAMaxTTLEachTokenIsServedAsExpiringThenAndRevokedAtThatAge() async throws {
        let signIn = GrantSignIn(grant: "brief", account: "work", scopes: nil, maxLifetime: .seconds(30))
        var own = Fixtures.account()
        own.name = signIn.name
        let http = FakeHTTP()
        http.tokenReplies = (1...4).map { FakeHTTP.tokenReply(access: "at-\($0)", refresh: nil, expiresIn: 3600) }
        let clock = ManualClock()
        let broker = Fixtures.broker(store: MemorySecretStore(items: [SecretKey(own): Secret("rt-own")]), http: http, clock: clock)
        try await broker.addGrantSignIn(signIn)
        let token = try await broker.accessToken(account: signIn.name)
        XCTAssertEqual(token.accessToken.reveal(), "at-1")
        XCTAssertLessThanOrEqual(token.expiresIn, .seconds(30), "served as expiring at the cap, not the server's hour")
        XCTAssertEqual(http.tokenPosts.last?["scope"], "openid email", "its account's scopes")
        XCTAssertTrue(http.revokePosts.isEmpty)

        let asleep = await clock.waitForSleepers(1)
        XCTAssertTrue(asleep, "the token's revocation waits for its age")
        clock.advance(.seconds(29))
        try await Task.sleep(for: .milliseconds(20))
        XCTAssertTrue(http.revokePosts.isEmpty, "not before")
        clock.advance(.seconds(1))
        for _ in 0..<1000 where http.revokePosts.isEmpty { try await Task.sleep(for: .milliseconds(2)) }
        XCTAssertEqual(http.revokePosts.first?["token"], "at-1", "revoked at its age")
        XCTAssertEqual(http.revokePosts.first?["token_type_hint"], "access_token")
        let next = try await broker.accessToken(account: signIn.name)
        XCTAssertEqual(next.accessToken.reveal(), "at-2", "a revoked token is not served again")
    }
}
