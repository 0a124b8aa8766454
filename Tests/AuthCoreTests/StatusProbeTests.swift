import AuthTestSupport
@testable import AuthCore
import Foundation
import Logging
import XCTest

/// `status` asks the keyring twice per probe (its state, then one attribute search) however many accounts there
/// are, never loads a token for it, and concurrent `status` calls share one probe unless a keyring write came
/// between them.
final class StatusProbeTests: XCTestCase {
    func testOneSearchForAllAccountsAndNoTokenLoaded() async throws {
        let accounts = ["work", "personal", "other"].map { Fixtures.account($0) }
        let store = MemorySecretStore(items: [SecretKey(accounts[1]): Secret("rt-personal")])
        let broker = Fixtures.broker(accounts: accounts, store: store)
        let status = await broker.status()
        XCTAssertEqual(status.keyring, .available)
        XCTAssertEqual(status.accounts.map(\.name), ["work", "personal", "other"])
        XCTAssertEqual(status.accounts.map(\.hasRefreshToken), [false, true, false])
        let searches = await store.searches
        XCTAssertEqual(searches, 1)
        let loads = await store.loads
        XCTAssertEqual(loads, 0, "status must not load a refresh token to learn that one exists")
    }

    func testAFailedSearchLeavesTheAnswerUnknown() async throws {
        let store = GatedStore(items: [SecretKey(Fixtures.account()): Secret("rt-1")])
        await store.failSearches()
        let broker = broker(store)
        let status = await broker.status()
        XCTAssertEqual(status.keyring, .available)
        XCTAssertNil(status.accounts.first?.hasRefreshToken, "a failed search is 'unknown', not 'signed out'")
    }

    func testConcurrentStatusCallsShareOneProbe() async throws {
        let store = GatedStore(items: [SecretKey(Fixtures.account()): Secret("rt-1")])
        await store.hold()
        let broker = broker(store)
        let callers = (0..<20).map { _ in Task { await broker.status() } }
        try await waitUntil { await store.searches >= 1 }
        try await Task.sleep(for: .milliseconds(200))   // every caller has reached the broker by now
        await store.release()
        for caller in callers {
            let status = await caller.value
            XCTAssertEqual(status.accounts.first?.hasRefreshToken, true)
        }
        let searches = await store.searches
        XCTAssertEqual(searches, 1, "20 concurrent status calls should share one keyring search")
    }

    func testAStatusAskedAfterAWriteDoesNotShareAProbeFromBeforeIt() async throws {
        let store = GatedStore(items: [SecretKey(Fixtures.account()): Secret("rt-1")])
        await store.hold()
        let broker = broker(store)
        let before = Task { await broker.status() }
        try await waitUntil { await store.searches == 1 }
        // Signing out deletes the token while that probe is still waiting for the keyring.
        let outcome = try await broker.logout(account: "work")
        XCTAssertTrue(outcome.hadRefreshToken)
        let after = Task { await broker.status() }
        try await waitUntil { await store.searches == 2 }
        await store.release()
        let answer = await after.value
        XCTAssertEqual(answer.accounts.first?.hasRefreshToken, false)
        _ = await before.value
    }

    private func broker(_ store: GatedStore) -> TokenBroker {
        let http = FakeHTTP()
        http.discovery["https://issuer.example/.well-known/openid-configuration"] =
            HTTPReply(status: 200, body: Fixtures.discoveryBody)
        return TokenBroker(accounts: [Fixtures.account()], store: store, http: http, redirects: FakeRedirects(),
                           browser: FakeBrowser(), logger: Logger(label: "test"))
    }

    private func waitUntil(_ condition: () async -> Bool, file: StaticString = #filePath, line: UInt = #line) async throws {
        let deadline = ContinuousClock.now + .seconds(5)
        while ContinuousClock.now < deadline {
            if await condition() { return }
            try await Task.sleep(for: .milliseconds(5))
        }
        XCTFail("condition not met within 5 s", file: file, line: line)
        throw CancellationError()
    }
}

/// A store whose attribute searches wait until released (a keyring that is slow to answer), or fail.
actor GatedStore: SecretStore {
    private let inner: MemorySecretStore
    private var holding = false
    private var failing = false
    private var held: [CheckedContinuation<Void, Never>] = []
    private(set) var searches = 0

    init(items: [SecretKey: Secret]) { inner = MemorySecretStore(items: items) }

    func hold() { holding = true }
    func failSearches() { failing = true }
    func release() {
        holding = false
        for waiter in held { waiter.resume() }
        held = []
    }

    func storedKeys() async throws(AuthError) -> Set<SecretKey> {
        searches += 1
        if holding { await withCheckedContinuation { held.append($0) } }
        if failing { throw AuthError(.keyringError, "test search failure") }
        return try await inner.storedKeys()
    }
    func loadItem(_ key: SecretKey) async throws(AuthError) -> KeyringItem? { try await inner.loadItem(key) }
    func store(_ item: KeyringItem, for key: SecretKey) async throws(AuthError) { try await inner.store(item, for: key) }
    func delete(_ key: SecretKey) async throws(AuthError) -> Bool { try await inner.delete(key) }
    func state() async -> KeyringState { await inner.state() }
}
