@testable import AuthCore
import AuthTestSupport
import XCTest

/// The broker's way to the keyring (``CredentialStore``) over the in-memory store: "nothing stored" is told apart
/// from "keyring locked" and "no Secret Service", and the `status` probe is bounded and retired by writes. The
/// same rules against a real gnome-keyring: LibsecretStoreTests and the e2e keyring tests.
final class CredentialStoreTests: XCTestCase {
    let key = SecretKey(Fixtures.account())
    let clock = ManualClock()

    func testALockedOrAbsentKeyringIsNeverReportedAsNotSignedIn() async throws {
        let store = MemorySecretStore(items: [key: Secret("rt-1")])
        let gateway = CredentialStore(store: store, time: clock, probeLimit: .seconds(2))
        let found = try await gateway.load(key)
        XCTAssertEqual(found?.secret.reveal(), "rt-1")

        await store.setState(.locked)
        do {
            _ = try await gateway.load(key)
            XCTFail("a locked collection hides its items: that is not 'no sign-in'")
        } catch {
            XCTAssertEqual(error.code, .keyringLocked)
        }
        let seen = try await gateway.item(key)
        XCTAssertNil(seen, "item() is the raw lookup: nothing, without the double check")

        await store.setState(.absent)
        do {
            _ = try await gateway.load(key)
            XCTFail("no Secret Service is not 'no sign-in'")
        } catch {
            XCTAssertEqual(error.code, .keyringUnavailable)
        }
        let keys = await gateway.storedKeysIfAvailable()
        XCTAssertNil(keys)

        await store.setState(.available)
        let other = SecretKey(Fixtures.account("home"))
        let none = try await gateway.load(other)
        XCTAssertNil(none, "an unlocked keyring without the item: truly not signed in")
    }

    func testTheProbeSeesWritesAndDeletes() async throws {
        let store = MemorySecretStore()
        let gateway = CredentialStore(store: store, time: clock, probeLimit: .seconds(2))
        var view = await gateway.view()
        XCTAssertEqual(view.state, .available)
        XCTAssertEqual(view.stored, [])
        try await gateway.write(KeyringItem(secret: Secret("rt-1"), validUntil: nil, warnedAt: nil), for: key)
        view = await gateway.view()
        XCTAssertEqual(view.stored, [key])
        let deleted = try await gateway.delete(key)
        XCTAssertTrue(deleted)
        view = await gateway.view()
        XCTAssertEqual(view.stored, [])
    }

    func testAKeyringThatDoesNotAnswerIsAnErrorAfterTheLimitOnTheInjectedClock() async {
        let gateway = CredentialStore(store: HungStore(), time: clock, probeLimit: .seconds(2))
        let state = Task { await gateway.state() }
        let sleeping = await clock.waitForSleepers(1)
        XCTAssertTrue(sleeping)
        clock.advance(.seconds(2))
        let seen = await state.value
        XCTAssertEqual(seen, .error)
    }

    /// What `status`, `doctor` and a keyring error advise: the answering service's words for a lock, the store
    /// setting's for a missing or unused Secret Service, nothing when it is available.
    func testAdviceFollowsTheStateTheStoreSettingAndWhoAnswers() {
        let service = KeyringService(program: "/usr/bin/x", unlock: "unlock x")
        XCTAssertNil(KeyringState.available.advice(store: .auto, service: service))
        XCTAssertEqual(KeyringState.locked.advice(store: .auto, service: service), "unlock x")
        XCTAssertTrue(KeyringState.error.advice(store: .secretService, service: nil)?.contains("see the agent's log") ?? false)
        XCTAssertTrue(KeyringState.absent.advice(store: .auto, service: nil)?.contains("kept in memory") ?? false)
        XCTAssertTrue(KeyringState.absent.advice(store: .secretService, service: nil)?.contains("store = \"auto\"") ?? false)
        XCTAssertTrue(KeyringState.unused.advice(store: .memory, service: nil)?.hasPrefix("store = \"memory\"") ?? false)
        XCTAssertEqual(AuthError.keyringLocked(service).keyringAdvice, "unlock x")
        XCTAssertNotNil(AuthError.keyringUnavailable("gone").keyringAdvice)
    }
}
