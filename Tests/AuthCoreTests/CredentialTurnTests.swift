import AuthTestSupport
@testable import AuthCore
import Foundation
import XCTest

/// The keyring item's turn (TokenBroker+Redemption.swift): whatever reads the refresh token and writes it back (a
/// refresh, a sign-in's result, a sign-out) waits for a refresh under way, and a reload that resets or removes the
/// account neither strands what waits for the turn nor loses a rotated token the keyring refused.
final class CredentialTurnTests: XCTestCase {
    let key = SecretKey(Fixtures.account())

    /// Returns once `condition` holds, yielding to the broker in between; fails after many turns without it (no
    /// sleeping: every step the condition waits for is the broker's own, on its executor).
    func waitUntil(_ what: String, file: StaticString = #filePath, line: UInt = #line,
                   _ condition: () async -> Bool) async {
        for _ in 0..<100_000 {
            if await condition() { return }
            await Task.yield()
        }
        XCTFail("never happened: \(what)", file: file, line: line)
    }

    /// `task`'s value, or a failure after `seconds` (a stranded task would otherwise hang the suite).
    func value<T: Sendable>(of task: Task<T, Error>, within seconds: Int = 20) async throws -> T {
        try await withThrowingTaskGroup(of: T?.self) { group in
            group.addTask { try await task.value }
            group.addTask {
                try await Task.sleep(for: .seconds(seconds))
                return nil
            }
            defer { group.cancelAll() }
            guard let first = try await group.next(), let result = first else {
                throw AuthError.internalError("still waiting after \(seconds) s")
            }
            return result
        }
    }

    func testLogoutLetsARefreshUnderWayFinishAndRevokesTheTokenItRotatedTo() async throws {
        let store = MemorySecretStore(items: [key: Secret("rt-1")])
        let http = FakeHTTP()
        let gate = TokenGate()
        http.tokenGate = gate
        http.tokenReplies = [FakeHTTP.tokenReply(access: "at-2", refresh: "rt-2")]
        let broker = Fixtures.broker(store: store, http: http)
        let refresh = Task { try await broker.accessToken(account: "work") }
        await gate.arrived(1)
        let logout = Task { try await broker.logout(account: "work") }
        await waitUntil("the logout waits for the refresh") { await broker.turns[self.key]?.waiters.count == 1 }
        gate.open()
        let served = try await value(of: refresh)
        XCTAssertEqual(served.accessToken.reveal(), "at-2", "the caller that asked before the logout gets its token")
        let outcome = try await value(of: logout)
        XCTAssertEqual(outcome.revoked, true)
        XCTAssertEqual(http.revokePosts.map { $0["token"] }, ["rt-2"], "the token the server issued last is revoked")
        let kept = await store.items[key]
        XCTAssertNil(kept, "nothing of the sign-in is left in the keyring after the logout")
        await assertThrows(.loginRequired) { _ = try await broker.accessToken(account: "work") }
        XCTAssertEqual(http.tokenPosts.count, 1)
    }

    func testASignInThatEndsDuringARefreshKeepsItsRefreshTokenAndItsAccessToken() async throws {
        let store = MemorySecretStore(items: [key: Secret("rt-old")])
        let http = FakeHTTP()
        let gate = TokenGate()
        http.tokenGate = gate
        http.tokenGateGrant = "refresh_token"
        let browser = FakeBrowser()
        let redirects = FakeRedirects()
        let broker = Fixtures.broker(store: store, http: http, redirects: redirects, browser: browser)
        let refresh = Task { try await broker.accessToken(account: "work") }
        await gate.arrived(1)

        let ticket = try await broker.beginLogin(account: "work")
        let state = try XCTUnwrap(browser.lastQuery["state"]?.first)
        let nonce = try XCTUnwrap(browser.lastQuery["nonce"]?.first)
        // The sign-in's code exchange answers first (it is not held); the refresh's answer comes second.
        http.tokenReplies = [FakeHTTP.tokenReply(access: "at-new", refresh: "rt-new",
                                                 idToken: await Fixtures.signedIDToken(nonce: nonce)),
                             FakeHTTP.tokenReply(access: "at-rotated", refresh: "rt-rotated")]
        XCTAssertEqual(redirects.deliver("code=the-code&state=\(state)"), .success)
        let login = Task { try await broker.awaitLogin(ticket) }
        await waitUntil("the sign-in waits for the refresh") { await broker.turns[self.key]?.waiters.count == 1 }
        gate.open()
        _ = try await value(of: refresh)
        _ = try await value(of: login)
        let keptSecret = await store.items[key]
        let kept = try StoredCredential(stored: XCTUnwrap(keptSecret))
        XCTAssertEqual(kept.refreshToken?.reveal(), "rt-new", "the new sign-in's refresh token is the one kept")
        let token = try await broker.accessToken(account: "work")
        XCTAssertEqual(token.accessToken.reveal(), "at-new", "the new sign-in's access token is the one served")
    }

    func testAReloadWhileARefreshWaitsForTheTurnDoesNotStrandIt() async throws {
        var account = Fixtures.account(scopes: ["read", "write"])
        account.scopedTokens = true
        let store = MemorySecretStore(items: [SecretKey(account): Secret("rt-1")])
        let http = FakeHTTP()
        let gate = TokenGate()
        http.tokenGate = gate
        http.tokenReplies = (1...3).map { FakeHTTP.tokenReply(access: "at-\($0)", refresh: "rt-\($0 + 1)") }
        let broker = Fixtures.broker(accounts: [account], store: store, http: http)
        let whole = Task { try await broker.accessToken(account: "work") }
        await gate.arrived(1)
        let scoped = Task { try await broker.accessToken(account: "work", scopes: ["read"]) }
        await waitUntil("the scoped refresh waits for the turn") {
            await broker.turns[SecretKey(account)]?.waiters.count == 1
        }
        var reset = account
        reset.scopes = ["read"]
        let outcome = await broker.reconfigure([reset])
        XCTAssertEqual(outcome.reset, ["work"])
        gate.open()
        _ = try await value(of: whole)
        let served = try await value(of: scoped)
        XCTAssertEqual(served.accessToken.reveal(), "at-2")
        XCTAssertEqual(http.tokenPosts.map { $0["refresh_token"] }, ["rt-1", "rt-2"],
                       "the waiting refresh redeemed the token the first one rotated to")
    }

    /// A refresh of rt-1 held at the token endpoint while a reload resets the account (its scopes change). The
    /// server answers it with at-old-settings and rt-2, and the next refresh with at-new-settings and rt-3.
    func refreshHeldAcrossAReload() async throws
        -> (broker: TokenBroker, store: MemorySecretStore, http: FakeHTTP, gate: TokenGate,
            before: Task<AccessTokenGrant, Error>) {
        let store = MemorySecretStore(items: [key: Secret("rt-1")])
        let http = FakeHTTP()
        let gate = TokenGate()
        http.tokenGate = gate
        http.tokenReplies = [FakeHTTP.tokenReply(access: "at-old-settings", refresh: "rt-2"),
                             FakeHTTP.tokenReply(access: "at-new-settings", refresh: "rt-3")]
        let broker = Fixtures.broker(store: store, http: http)
        let before = Task { try await broker.accessToken(account: "work") }
        await gate.arrived(1)
        let outcome = await broker.reconfigure([Fixtures.account(scopes: ["openid"])])
        XCTAssertEqual(outcome.reset, ["work"])
        return (broker, store, http, gate, before)
    }

    func testARefreshUnderWayAtAReloadServesOnlyItsCallersAndTheNextOneWaitsForIt() async throws {
        let (broker, store, http, gate, before) = try await refreshHeldAcrossAReload()
        let after = Task { try await broker.accessToken(account: "work") }
        await waitUntil("the refresh under the new settings waits for the turn") {
            await broker.turns[self.key]?.waiters.count == 1
        }
        gate.open()
        let old = try await value(of: before)
        XCTAssertEqual(old.accessToken.reveal(), "at-old-settings", "asked before the reload: served as asked")
        let new = try await value(of: after)
        XCTAssertEqual(new.accessToken.reveal(), "at-new-settings")
        XCTAssertEqual(http.tokenPosts.map { $0["refresh_token"] }, ["rt-1", "rt-2"], "never the same token twice")
        XCTAssertEqual(http.tokenPosts.last?["scope"], "openid")
        let cached = try await broker.accessToken(account: "work")
        XCTAssertEqual(cached.accessToken.reveal(), "at-new-settings", "the old settings' token never reached the cache")
        let kept = await store.items[key]
        XCTAssertEqual(kept?.reveal(), "rt-3")
    }

    func testATokenAskedForUnderTheOldSettingsNeverReachesTheNewCache() async throws {
        let (broker, store, http, gate, before) = try await refreshHeldAcrossAReload()
        gate.open()
        let old = try await value(of: before)
        XCTAssertEqual(old.accessToken.reveal(), "at-old-settings")
        let kept = await store.items[key]
        XCTAssertEqual(kept?.reveal(), "rt-2", "the rotation is stored all the same")
        let status = await broker.status()
        XCTAssertNil(status.accounts.first?.accessTokenExpiresIn, "nothing cached for the new settings")
        let new = try await broker.accessToken(account: "work")
        XCTAssertEqual(new.accessToken.reveal(), "at-new-settings")
        XCTAssertEqual(http.tokenPosts.map { $0["refresh_token"] }, ["rt-1", "rt-2"])
    }

    func testARotatedTokenTheKeyringRefusedSurvivesAReload() async throws {
        let store = MemorySecretStore(items: [key: Secret("rt-1")])
        let http = FakeHTTP()
        http.tokenReplies = [FakeHTTP.tokenReply(access: "at-1", refresh: "rt-2"),
                             FakeHTTP.tokenReply(access: "at-2", refresh: "rt-3")]
        let gate = TokenGate()
        http.tokenGate = gate
        let broker = Fixtures.broker(store: store, http: http)
        let refresh = Task { try await broker.accessToken(account: "work") }
        await gate.arrived(1)
        await store.setState(.error)  // read already: the rotated token's write is what fails
        gate.open()
        await assertThrows(.keyringError) { _ = try await self.value(of: refresh) }
        // Held where status and the idle exit see it: stopping now would lose the only token the server accepts.
        let holds = await broker.holdsSignInsInMemory
        XCTAssertTrue(holds)
        let held = await broker.status().accounts.first
        XCTAssertEqual(held?.keptInMemory, true)
        XCTAssertEqual(held?.keyringMoveError, "test store failure")
        await store.setState(.available)
        _ = await broker.reconfigure([Fixtures.account(scopes: ["openid"])])
        let token = try await broker.accessToken(account: "work")
        XCTAssertEqual(token.accessToken.reveal(), "at-2")
        XCTAssertEqual(http.tokenPosts.map { $0["refresh_token"] }, ["rt-1", "rt-2"],
                       "the token the server rotated to is redeemed, not the one it replaced")
        let kept = await store.items[key]
        XCTAssertEqual(kept?.reveal(), "rt-3")
    }

    /// A logout while the sign-in still fetches the provider's metadata cancels it as cancelled, not as the
    /// unreachable server the HTTP client reports for its cut-short fetch (seen as a flaky D-Bus Logout test).
    func testASignInCancelledDuringItsDiscoveryFailsAsCancelled() async throws {
        let http = FakeHTTP()
        let gate = TokenGate()
        http.getGate = gate
        let broker = Fixtures.broker(store: MemorySecretStore(), http: http, browser: FakeBrowser())
        let begin = Task { try await broker.beginLogin(account: "work") }
        await gate.arrived(1)
        _ = try await broker.logout(account: "work")
        gate.open()
        await assertThrows(.loginCancelled) { _ = try await self.value(of: begin) }
        let pending = await broker.status().accounts.first?.loginPending
        XCTAssertEqual(pending, false)
    }

    func testAReloadCancelsASignInAskedForUnderTheOldSettings() async throws {
        let store = MemorySecretStore()
        let http = FakeHTTP()
        let browser = FakeBrowser()
        let broker = Fixtures.broker(store: store, http: http, browser: browser)
        let ticket = try await broker.beginLogin(account: "work")
        let login = Task { try await broker.awaitLogin(ticket) }
        _ = await broker.reconfigure([Fixtures.account(scopes: ["openid"])])
        await assertThrows(.loginCancelled) { _ = try await self.value(of: login) }
        let kept = await store.items[key]
        XCTAssertNil(kept)
        XCTAssertTrue(http.tokenPosts.isEmpty)
    }
}
