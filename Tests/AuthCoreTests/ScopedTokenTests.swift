import AuthTestSupport
@testable import AuthCore
import Foundation
import XCTest

/// Access tokens for a subset of the account's scopes and/or an RFC 8707 resource (TokenBroker+Scopes.swift).
final class ScopedTokenTests: XCTestCase {
    let account: AccountConfig = {
        var account = Fixtures.account(scopes: ["read", "write", "admin"])
        account.scopedTokens = true
        return account
    }()
    var key: SecretKey { SecretKey(account) }

    private func broker(_ store: MemorySecretStore, _ http: FakeHTTP, clock: ManualClock = ManualClock()) -> TokenBroker {
        Fixtures.broker(accounts: [account], store: store, http: http, clock: clock)
    }

    func testEachScopeSetAndResourceHasItsOwnEntryAndNormalisedSetsShareOne() async throws {
        let store = MemorySecretStore(items: [key: Secret("rt-1")])
        let http = FakeHTTP()
        http.tokenReplies = [FakeHTTP.tokenReply(access: "at-default"), FakeHTTP.tokenReply(access: "at-read-write"),
                             FakeHTTP.tokenReply(access: "at-read-api")]
        let broker = broker(store, http)

        let plain = try await broker.accessToken(account: "work")
        let subset = try await broker.accessToken(account: "work", scopes: ["write", "read"])
        let again = try await broker.accessToken(account: "work", scopes: ["read", "write", "read"])
        let resource = try await broker.accessToken(account: "work", scopes: ["read"], resource: "https://api.example/")
        let plainAgain = try await broker.accessToken(account: "work")
        let allScopes = try await broker.accessToken(account: "work", scopes: ["admin", "write", "read"])

        XCTAssertEqual(plain.accessToken.reveal(), "at-default")
        XCTAssertEqual(subset.accessToken.reveal(), "at-read-write")
        XCTAssertEqual(again.accessToken.reveal(), "at-read-write", "'write read' and 'read write read' share one entry")
        XCTAssertEqual(resource.accessToken.reveal(), "at-read-api")
        XCTAssertEqual(plainAgain.accessToken.reveal(), "at-default", "the default entry is untouched by scoped ones")
        XCTAssertEqual(allScopes.accessToken.reveal(), "at-default", "the full configured set is the default entry")
        XCTAssertEqual(subset.scopes, ["read", "write"], "without a scope in the reply, the asked (normalised) set is reported")
        XCTAssertEqual(http.tokenPosts.count, 3)

        // The refresh request carries the normalised subset and the resource; the default one the account's
        // configured scopes (as asked at sign-in) and no resource.
        XCTAssertEqual(http.tokenPosts[0]["scope"], "read write admin")
        XCTAssertNil(http.tokenPosts[0]["resource"])
        XCTAssertEqual(http.tokenPosts[1]["scope"], "read write")
        XCTAssertNil(http.tokenPosts[1]["resource"])
        XCTAssertEqual(http.tokenPosts[2]["scope"], "read")
        XCTAssertEqual(http.tokenPosts[2]["resource"], "https://api.example/")
        XCTAssertEqual(http.tokenPosts[2]["grant_type"], "refresh_token")
        XCTAssertEqual(http.tokenPosts[2]["refresh_token"], "rt-1")
    }

    func testScopedEntryIsServedFromCacheUntilStale() async throws {
        let store = MemorySecretStore(items: [key: Secret("rt-1")])
        let http = FakeHTTP()
        let clock = ManualClock()
        http.tokenReplies = [FakeHTTP.tokenReply(access: "at-1", expiresIn: 600), FakeHTTP.tokenReply(access: "at-2", expiresIn: 600)]
        let broker = broker(store, http, clock: clock)
        let first = try await broker.accessToken(account: "work", scopes: ["read"])
        clock.advance(.seconds(300))
        let cached = try await broker.accessToken(account: "work", scopes: ["read"])
        XCTAssertEqual(cached.accessToken.reveal(), first.accessToken.reveal())
        XCTAssertEqual(http.tokenPosts.count, 1)
        clock.advance(.seconds(295))
        let renewed = try await broker.accessToken(account: "work", scopes: ["read"])
        XCTAssertEqual(renewed.accessToken.reveal(), "at-2", "a scoped token near expiry is refreshed")
        XCTAssertEqual(http.tokenPosts.last?["scope"], "read")
    }

    func testScopeOutsideTheAccountIsRefusedBeforeAnyRequest() async throws {
        let store = MemorySecretStore(items: [key: Secret("rt-1")])
        let http = FakeHTTP()
        http.tokenReplies = [FakeHTTP.tokenReply(access: "at-1")]
        let broker = broker(store, http)
        await assertThrows(.invalidScope) { _ = try await broker.accessToken(account: "work", scopes: ["read", "delete"]) }
        await assertThrows(.invalidScope) { _ = try await broker.accessToken(account: "work", scopes: ["read write"]) }
        await assertThrows(.invalidScope) { _ = try await broker.accessToken(account: "work", scopes: [""]) }
        for bad in ["api.example", "/relative", "https://api.example/#frag", "https://api.example/ x"] {
            await assertThrows(.invalidTarget) { _ = try await broker.accessToken(account: "work", resource: bad) }
        }
        XCTAssertEqual(http.tokenPosts.count, 0, "nothing was sent to the server")
        XCTAssertTrue(http.gets.isEmpty, "not even discovery")
        do {
            _ = try await broker.accessToken(account: "work", scopes: ["delete"])
        } catch {
            XCTAssertTrue(error.message.contains("delete") && error.message.contains("read write admin"), error.message)
        }
    }

    func testScopedRequestsNeedTheAccountToAllowThem() async throws {
        var plain = account
        plain.scopedTokens = false
        let store = MemorySecretStore(items: [SecretKey(plain): Secret("rt-1")])
        let http = FakeHTTP()
        http.tokenReplies = [FakeHTTP.tokenReply(access: "at-1")]
        let broker = Fixtures.broker(accounts: [plain], store: store, http: http)
        await assertThrows(.invalidScope) { _ = try await broker.accessToken(account: "work", scopes: ["read"]) }
        await assertThrows(.invalidTarget) { _ = try await broker.accessToken(account: "work", resource: "https://api.example/") }
        XCTAssertEqual(http.tokenPosts.count, 0)
        let full = try await broker.accessToken(account: "work", scopes: ["write", "admin", "read"])
        XCTAssertEqual(full.accessToken.reveal(), "at-1", "the full configured set is the default entry, always allowed")
    }

    func testServerRefusingTheScopeIsInvalidScopeAndKeepsTheRefreshToken() async throws {
        let store = MemorySecretStore(items: [key: Secret("rt-1")])
        let http = FakeHTTP()
        http.tokenReplies = [FakeHTTP.errorReply(400, "invalid_scope"), FakeHTTP.errorReply(400, "invalid_target")]
        let broker = broker(store, http)
        await assertThrows(.invalidScope) { _ = try await broker.accessToken(account: "work", scopes: ["admin"]) }
        await assertThrows(.invalidTarget) { _ = try await broker.accessToken(account: "work", resource: "https://other.example/") }
        let stored = await store.items[key]
        XCTAssertEqual(stored?.reveal(), "rt-1")
    }

    func testSingleFlightPerKey() async throws {
        let store = MemorySecretStore(items: [key: Secret("rt-1")])
        let http = FakeHTTP()
        http.tokenDelay = .milliseconds(100)
        http.tokenReplies = [FakeHTTP.tokenReply(access: "at-a", refresh: "rt-2"), FakeHTTP.tokenReply(access: "at-b", refresh: "rt-3"),
                             FakeHTTP.tokenReply(access: "at-c", refresh: "rt-4")]
        let broker = broker(store, http)
        let requests: [[String]?] = [nil, ["read"], ["write", "read"]]
        let results = try await withThrowingTaskGroup(of: (Int, String).self) { group in
            for index in 0..<150 {
                let scopes = requests[index % 3]
                group.addTask { (index % 3, try await broker.accessToken(account: "work", scopes: scopes).accessToken.reveal()) }
            }
            return try await group.reduce(into: [Int: Set<String>]()) { $0[$1.0, default: []].insert($1.1) }
        }
        XCTAssertEqual(http.tokenPosts.count, 3, "150 callers over 3 keys: one refresh per key")
        XCTAssertEqual(results.count, 3)
        XCTAssertTrue(results.values.allSatisfy { $0.count == 1 }, "every caller of one key got the same token: \(results)")
        XCTAssertEqual(Set(results.values.flatMap { $0 }), ["at-a", "at-b", "at-c"], "each key has its own token")
        // The refreshes ran one after another, each with the token the previous one rotated in.
        XCTAssertEqual(http.tokenPosts.map { $0["refresh_token"] }, ["rt-1", "rt-2", "rt-3"])
        let stored = await store.items[key]
        XCTAssertEqual(stored?.reveal(), "rt-4")
    }

    func testRotationFromAScopedRefreshIsSavedBeforeUseAndTheDefaultEntryUsesIt() async throws {
        let store = MemorySecretStore(items: [key: Secret("rt-1")])
        let http = FakeHTTP()
        let clock = ManualClock()
        http.tokenReplies = [FakeHTTP.tokenReply(access: "at-default", refresh: "rt-2", expiresIn: 600),
                             FakeHTTP.tokenReply(access: "at-read", refresh: "rt-3", expiresIn: 3600),
                             FakeHTTP.tokenReply(access: "at-default-2", refresh: "rt-4", expiresIn: 3600)]
        let broker = broker(store, http, clock: clock)
        _ = try await broker.accessToken(account: "work")
        let scoped = try await broker.accessToken(account: "work", scopes: ["read"])
        XCTAssertEqual(scoped.accessToken.reveal(), "at-read")
        let afterScoped = await store.items[key]
        XCTAssertEqual(afterScoped?.reveal(), "rt-3", "the rotated token from the scoped refresh is in the keyring")
        XCTAssertEqual(http.tokenPosts[1]["refresh_token"], "rt-2")

        clock.advance(.seconds(595))
        let renewed = try await broker.accessToken(account: "work")
        XCTAssertEqual(renewed.accessToken.reveal(), "at-default-2")
        XCTAssertEqual(http.tokenPosts[2]["refresh_token"], "rt-3", "the default entry refreshes with what is stored")
        let cachedScoped = try await broker.accessToken(account: "work", scopes: ["read"])
        XCTAssertEqual(cachedScoped.accessToken.reveal(), "at-read", "the scoped entry keeps working")
        XCTAssertEqual(http.tokenPosts.count, 3)
    }

    func testLogoutDropsEveryEntry() async throws {
        let store = MemorySecretStore(items: [key: Secret("rt-1")])
        let http = FakeHTTP()
        http.tokenReplies = [FakeHTTP.tokenReply(access: "at-default"), FakeHTTP.tokenReply(access: "at-read")]
        let broker = broker(store, http)
        _ = try await broker.accessToken(account: "work")
        _ = try await broker.accessToken(account: "work", scopes: ["read"])
        let count = await broker.status().accounts.first { $0.name == "work" }?.scopedTokens.count
        XCTAssertEqual(count, 1)
        _ = try await broker.logout(account: "work")
        let after = await broker.status().accounts.first { $0.name == "work" }?.scopedTokens.count
        XCTAssertEqual(after, 0)
        await assertThrows(.loginRequired) { _ = try await broker.accessToken(account: "work", scopes: ["read"]) }
        await assertThrows(.loginRequired) { _ = try await broker.accessToken(account: "work") }
    }

    func testScopedEntriesAreRefreshedProactivelyAndShownInStatus() async throws {
        let store = MemorySecretStore(items: [key: Secret("rt-1")])
        let http = FakeHTTP()
        let clock = ManualClock()
        http.tokenReplies = [FakeHTTP.tokenReply(access: "at-default", expiresIn: 7200),
                             FakeHTTP.tokenReply(access: "at-read-1", expiresIn: 3600),
                             FakeHTTP.tokenReply(access: "at-read-2", expiresIn: 3600)]
        let broker = TokenBroker(accounts: [account], store: store, http: http, redirects: FakeRedirects(),
                                 browser: FakeBrowser(), time: clock, random: { 0 }, logger: .init(label: "test"))
        http.discovery["https://issuer.example/.well-known/openid-configuration"] = HTTPReply(status: 200, body: Fixtures.discoveryBody)
        _ = try await broker.accessToken(account: "work")
        _ = try await broker.accessToken(account: "work", scopes: ["read"], resource: "https://api.example/")
        let scopedKey = try TokenCacheKey(scopes: ["read"], resource: "https://api.example/", account: account)

        var status = await broker.status()
        XCTAssertEqual(status.accounts[0].scopedTokens.count, 1)
        XCTAssertEqual(status.accounts[0].scopedTokens[0].scopes, ["read"])
        XCTAssertEqual(status.accounts[0].scopedTokens[0].resource, "https://api.example/")
        XCTAssertEqual(status.accounts[0].scopedTokens[0].expiresIn, .seconds(3600))

        clock.advance(.seconds(3000))
        var due = await broker.entriesDueForRefresh()
        XCTAssertEqual(due, [], "3000 s into 3600: outside the 360 s margin")
        let wait = await broker.nextProactiveCheck(ceiling: .seconds(3600))
        XCTAssertEqual(wait, .seconds(240), "the scoped entry's refresh moment wakes the loop")
        clock.advance(.seconds(250))
        due = await broker.entriesDueForRefresh()
        XCTAssertEqual(due, [TokenEntry(account: "work", key: scopedKey)], "only the scoped entry is inside its margin")
        let refreshed = await broker.refreshDueAccounts()
        XCTAssertEqual(refreshed, ["work"])
        XCTAssertEqual(http.tokenPosts.count, 3)
        XCTAssertEqual(http.tokenPosts[2]["scope"], "read")
        XCTAssertEqual(http.tokenPosts[2]["resource"], "https://api.example/")
        let token = try await broker.accessToken(account: "work", scopes: ["read"], resource: "https://api.example/")
        XCTAssertEqual(token.accessToken.reveal(), "at-read-2", "the caller gets the proactively refreshed token")
        status = await broker.status()
        XCTAssertEqual(status.accounts[0].scopedTokens[0].expiresIn, .seconds(3600))
        XCTAssertEqual(http.tokenPosts.count, 3)
    }

    func testAScopedRefreshTheServerRefusesIsNotRetriedOnATimer() async throws {
        let store = MemorySecretStore(items: [key: Secret("rt-1")])
        let http = FakeHTTP()
        let clock = ManualClock()
        http.tokenReplies = [FakeHTTP.tokenReply(access: "at-read-1", expiresIn: 3600), FakeHTTP.errorReply(400, "invalid_scope")]
        let broker = TokenBroker(accounts: [account], store: store, http: http, redirects: FakeRedirects(),
                                 browser: FakeBrowser(), time: clock, random: { 0 }, logger: .init(label: "test"))
        http.discovery["https://issuer.example/.well-known/openid-configuration"] = HTTPReply(status: 200, body: Fixtures.discoveryBody)
        _ = try await broker.accessToken(account: "work", scopes: ["read"])
        clock.advance(.seconds(3300))
        _ = await broker.refreshDueAccounts()
        XCTAssertEqual(http.tokenPosts.count, 2)
        let due = await broker.entriesDueForRefresh()
        XCTAssertEqual(due, [], "invalid_scope is not transient: the timer does not repeat it")
        let wait = await broker.nextProactiveCheck(ceiling: .seconds(60))
        XCTAssertEqual(wait, .seconds(60))
        let served = try await broker.accessToken(account: "work", scopes: ["read"])
        XCTAssertEqual(served.accessToken.reveal(), "at-read-1", "the still-valid token is served meanwhile")
    }

    /// The scoped entry follows the default entry's rules (one ``RefreshMachine``): after a resume while the network
    /// is still down, the stale but valid scoped token is served during the backoff instead of an error.
    func testAStaleScopedTokenIsServedDuringTheBackoffLikeTheDefaultOne() async throws {
        let store = MemorySecretStore(items: [key: Secret("rt-1")])
        let http = FakeHTTP()
        let clock = ManualClock()
        http.tokenReplies = [FakeHTTP.tokenReply(access: "at-read-1", expiresIn: 3600)]
        let broker = broker(store, http, clock: clock)
        _ = try await broker.accessToken(account: "work", scopes: ["read"])
        await broker.systemSuspending()
        clock.advance(.seconds(1800))
        http.tokenFailures = [AuthError(.serverUnreachable, "cannot reach the server: connection refused")]
        let retried = await broker.systemResumed()
        XCTAssertEqual(retried.map(\.key.scopes), [["read"]], "the resume refreshed the stale scoped entry, and failed")
        let served = try await broker.accessToken(account: "work", scopes: ["read"])
        XCTAssertEqual(served.accessToken.reveal(), "at-read-1", "a valid token beats an error while the server is unreachable")
        XCTAssertEqual(served.scopes, ["read"])
        XCTAssertEqual(http.tokenPosts.count, 2, "no second attempt during the backoff")
    }
}
