@testable import AuthCore
import AuthTestSupport
import XCTest

/// `[agent] store` (``StoreChoice``) in the broker's way to the keyring: with `auto` and no Secret Service, a
/// sign-in lives in memory and is said to; a locked or failing keyring is never taken for a missing one; a Secret
/// Service that appears gets the held items, the newest of each. The same against a real bus with no Secret
/// Service, and a gnome-keyring started later: Tests/e2e/test_memory_store.py.
final class CredentialStoreChoiceTests: XCTestCase {
    let key = SecretKey(Fixtures.account())
    let clock = ManualClock()

    func item(_ secret: String) -> KeyringItem { KeyringItem(secret: Secret(secret)) }

    func testAutoWithNoSecretServiceKeepsTheSignInInMemoryAndSaysSo() async throws {
        let store = MemorySecretStore()
        await store.setState(.absent)
        let gateway = CredentialStore(store: store, choice: .auto, time: clock, probeLimit: .seconds(2))
        let none = try await gateway.load(key)
        XCTAssertNil(none, "no Secret Service and nothing held: not signed in, not keyring_unavailable")

        let first = try await gateway.write(item("rt-1"), for: key)
        XCTAssertEqual(first, .memory(first: true))
        let again = try await gateway.write(item("rt-2"), for: key)
        XCTAssertEqual(again, .memory(first: false), "a rotation of a held item is not a new memory-only sign-in")
        let loaded = try await gateway.load(key)
        XCTAssertEqual(loaded?.secret.reveal(), "rt-2")
        let holds = await gateway.holdsItems
        XCTAssertTrue(holds)
        let view = await gateway.view()
        XCTAssertEqual(view.state, .absent)
        XCTAssertEqual(view.stored, [key])
        XCTAssertEqual(view.held, [key: .init(moveError: nil)])
        let writes = await store.writes
        XCTAssertEqual(writes, 0)

        let deleted = try await gateway.delete(key)
        XCTAssertTrue(deleted)
        let gone = try await gateway.load(key)
        XCTAssertNil(gone)
        let stillHolds = await gateway.holdsItems
        XCTAssertFalse(stillHolds)
    }

    func testALockedOrFailingKeyringIsNeverAReasonToKeepASignInInMemory() async throws {
        for state in [KeyringState.locked, .error] {
            let store = MemorySecretStore()
            await store.setState(state)
            let gateway = CredentialStore(store: store, choice: .auto, time: clock, probeLimit: .seconds(2))
            do {
                try await gateway.write(item("rt-1"), for: key)
                XCTFail("\(state): a store must fail, not fall back to memory")
            } catch {
                XCTAssertEqual(error.code, state == .locked ? .keyringLocked : .keyringError)
            }
            let holds = await gateway.holdsItems
            XCTAssertFalse(holds, "\(state)")
        }
        let store = MemorySecretStore(items: [key: Secret("rt-1")])
        await store.setState(.locked)
        let gateway = CredentialStore(store: store, choice: .auto, time: clock, probeLimit: .seconds(2))
        do {
            _ = try await gateway.load(key)
            XCTFail("a locked keyring is keyring_locked whatever the store setting")
        } catch {
            XCTAssertEqual(error.code, .keyringLocked)
        }
    }

    func testAFinishedSignInIsHeldWhileTheKeyringIsLockedAndWrittenWhenItIsUnlocked() async throws {
        for choice in [StoreChoice.auto, .secretService] {
            let store = MemorySecretStore()
            await store.setState(.locked)
            let gateway = CredentialStore(store: store, choice: choice, time: clock, probeLimit: .seconds(2))
            let stored = try await gateway.write(item("rt-1"), for: key, as: .signIn)
            XCTAssertEqual(stored, .held(.keyringLocked()), "\(choice)")
            let view = await gateway.view()
            XCTAssertEqual(view.held[key]?.moveError, AuthError.keyringLocked().message, "the reason is shown")
            let loaded = try await gateway.load(key)
            XCTAssertEqual(loaded?.secret.reveal(), "rt-1", "the sign-in serves tokens meanwhile")
            await store.setState(.available)
            let moved = await gateway.moveHeldItems()
            XCTAssertEqual(moved.map(\.key), [key])
            let entries = await store.entries
            XCTAssertEqual(entries[key]?.secret.reveal(), "rt-1", "\(choice): written once the keyring is unlocked")
        }
        // A rewrite of the same credential (its dates) fails as locked: the keyring keeps the item it had.
        let store = MemorySecretStore()
        await store.setState(.locked)
        let gateway = CredentialStore(store: store, choice: .auto, time: clock, probeLimit: .seconds(2))
        do {
            try await gateway.write(item("rt-1"), for: key)
            XCTFail("a rewrite fails as locked")
        } catch {
            XCTAssertEqual(error.code, .keyringLocked)
        }
        var holds = await gateway.holdsItems
        XCTAssertFalse(holds)
        // A rotated refresh token, which the server has already replaced the stored one with, is held whatever the
        // refusal, and written by the same moves.
        await store.setState(.error)
        let rotated = try await gateway.write(item("rt-2"), for: key, as: .rotation)
        XCTAssertEqual(rotated, .held(AuthError(.keyringError, "test store failure")))
        holds = await gateway.holdsItems
        XCTAssertTrue(holds, "held: the agent must not exit idle with it")
        let loaded = try await gateway.load(key)
        XCTAssertEqual(loaded?.secret.reveal(), "rt-2", "the next refresh redeems it")
        await store.setState(.available)
        let moved = await gateway.moveHeldItems()
        XCTAssertEqual(moved.map(\.key), [key])
        let entries = await store.entries
        XCTAssertEqual(entries[key]?.secret.reveal(), "rt-2")
    }

    func testSecretServiceOnlyKeepsTodaysError() async throws {
        let store = MemorySecretStore()
        await store.setState(.absent)
        let gateway = CredentialStore(store: store, choice: .secretService, time: clock, probeLimit: .seconds(2))
        do {
            try await gateway.write(item("rt-1"), for: key)
            XCTFail("store = secret-service: no memory fallback")
        } catch {
            XCTAssertEqual(error.code, .keyringUnavailable)
        }
        do {
            _ = try await gateway.load(key)
            XCTFail("store = secret-service: no Secret Service is keyring_unavailable")
        } catch {
            XCTAssertEqual(error.code, .keyringUnavailable)
        }
    }

    func testMemoryNeverAsksTheSecretService() async throws {
        let store = MemorySecretStore(items: [key: Secret("in-the-keyring")])
        let gateway = CredentialStore(store: store, choice: .memory, time: clock, probeLimit: .seconds(2))
        let before = try await gateway.load(key)
        XCTAssertNil(before, "the keyring's item is not read with store = memory")
        let stored = try await gateway.write(item("rt-1"), for: key)
        XCTAssertEqual(stored, .memory(first: true))
        let loaded = try await gateway.load(key)
        XCTAssertEqual(loaded?.secret.reveal(), "rt-1")
        let view = await gateway.view()
        XCTAssertEqual(view.state, .unused)
        XCTAssertEqual(view.stored, [key])
        let moved = await gateway.moveHeldItems()
        XCTAssertTrue(moved.isEmpty, "store = memory: nothing moves to a Secret Service")
        let (loads, writes, searches) = (await store.loads, await store.writes, await store.searches)
        XCTAssertEqual([loads, writes, searches], [0, 0, 0])
    }

    func testASecretServiceThatAppearsGetsTheHeldItemsAndARefusalIsKeptWithItsReason() async throws {
        let store = MemorySecretStore()
        await store.setState(.absent)
        let gateway = CredentialStore(store: store, choice: .auto, time: clock, probeLimit: .seconds(2))
        let other = SecretKey(Fixtures.account("home"))
        try await gateway.write(item("rt-work"), for: key)
        try await gateway.write(item("rt-home"), for: other)

        // It appears locked (KeePassXC with its database locked): nothing moves, and the reason is kept.
        await store.setState(.locked)
        let refused = await gateway.moveHeldItems()
        XCTAssertEqual(refused.map(\.key), [other, key])
        XCTAssertEqual(refused.compactMap(\.error?.code), [.keyringLocked, .keyringLocked])
        var view = await gateway.view()
        XCTAssertEqual(view.held[key]?.moveError, AuthError.keyringLocked().message)
        let still = try await gateway.load(key)
        XCTAssertEqual(still?.secret.reveal(), "rt-work", "a held item is read even while the keyring is locked")

        await store.setState(.available)
        let moved = await gateway.moveHeldItems()
        XCTAssertEqual(moved.map(\.key), [other, key])
        XCTAssertTrue(moved.allSatisfy { $0.error == nil })
        let entries = await store.entries
        XCTAssertEqual(entries[key]?.secret.reveal(), "rt-work")
        XCTAssertEqual(entries[other]?.secret.reveal(), "rt-home")
        view = await gateway.view()
        XCTAssertEqual(view.held, [:])
        XCTAssertEqual(view.stored, [key, other])
        let holds = await gateway.holdsItems
        XCTAssertFalse(holds)

        // From now on writes go to the keyring.
        let next = try await gateway.write(item("rt-work-2"), for: key)
        XCTAssertEqual(next, .keyring)
    }

    /// A change the keyring adapter hears (a Secret Service appeared) moves the held items at once, and says so.
    func testAChangeTheAdapterHearsMovesTheHeldItemsAtOnce() async throws {
        let store = MemorySecretStore()
        await store.setState(.absent)
        let events = BrokerEventHub()
        let credentials = CredentialStore(store: store, choice: .auto, time: clock, probeLimit: .seconds(2), events: events)
        try await credentials.write(item("rt-1"), for: key)
        var heard = events.subscribe().makeAsyncIterator()
        let following = Task { await credentials.followChanges() }
        defer { following.cancel() }
        await store.setState(.available)
        store.announceChange()
        let event = await heard.next()
        XCTAssertEqual(event, .accountChanged(key.account))
        let entries = await store.entries
        XCTAssertEqual(entries[key]?.secret.reveal(), "rt-1")
        let holds = await credentials.holdsItems
        XCTAssertFalse(holds)
    }

    func testARotationDuringTheMoveIsTheItemThatLands() async throws {
        let store = MoveGatedStore()
        let gateway = CredentialStore(store: store, choice: .auto, time: clock, probeLimit: .seconds(2))
        store.absent = true
        try await gateway.write(item("rt-1"), for: key)
        store.absent = false
        store.holdNextWrite()
        let move = Task { await gateway.moveHeldItems() }
        await store.waitForHeldWrite()
        // A refresh rotates the token while the keyring write of the old one is under way.
        let during = try await gateway.write(item("rt-2"), for: key)
        XCTAssertEqual(during, .memory(first: false))
        store.release()
        let report = await move.value
        XCTAssertEqual(report.map(\.key), [key])
        XCTAssertEqual(store.written.map { $0.secret.reveal() }, ["rt-1", "rt-2"])
        let holds = await gateway.holdsItems
        XCTAssertFalse(holds)
    }
}

/// A store whose next write waits until released (to run a write beside a move), and which can act absent.
private final class MoveGatedStore: SecretStore, @unchecked Sendable {
    private let lock = NSLock()
    private var _absent = false
    private var gate: CheckedContinuation<Void, Never>?
    private var holding = false
    private var entered: CheckedContinuation<Void, Never>?
    private var didEnter = false
    private var _written: [KeyringItem] = []

    var absent: Bool {
        get { lock.withLock { _absent } }
        set { lock.withLock { _absent = newValue } }
    }
    var written: [KeyringItem] { lock.withLock { _written } }

    func holdNextWrite() { lock.withLock { holding = true } }

    func waitForHeldWrite() async {
        await withCheckedContinuation { continuation in
            let now = lock.withLock { () -> Bool in
                if didEnter { return true }
                entered = continuation
                return false
            }
            if now { continuation.resume() }
        }
    }

    func release() {
        let waiting = lock.withLock { () -> CheckedContinuation<Void, Never>? in
            defer { gate = nil }
            return gate
        }
        waiting?.resume()
    }

    func loadItem(_ key: SecretKey) async throws(AuthError) -> KeyringItem? {
        if absent { throw AuthError.keyringUnavailable("test") }
        return nil
    }
    func storedKeys() async throws(AuthError) -> Set<SecretKey> { [] }
    func store(_ item: KeyringItem, for key: SecretKey) async throws(AuthError) {
        if absent { throw AuthError.keyringUnavailable("test") }
        let hold = lock.withLock { () -> Bool in defer { holding = false }; return holding }
        if hold {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let announce = lock.withLock { () -> CheckedContinuation<Void, Never>? in
                    gate = continuation
                    didEnter = true
                    defer { entered = nil }
                    return entered
                }
                announce?.resume()
            }
        }
        lock.withLock { _written.append(item) }
    }
    func delete(_ key: SecretKey) async throws(AuthError) -> Bool { false }
    func state() async -> KeyringState { absent ? .absent : .available }
}
