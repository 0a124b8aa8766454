import AuthCore
import Foundation
import KeyringStore
import XCTest

/// Keyring situations that need a bus of their own: a locked collection, a bus without a Secret Service, and a
/// Secret Service that stalls.
///
/// libsecret and GDBus cache the session bus connection and the service proxy per process, so another bus cannot
/// be used from this process. Each test here re-runs this test binary on a fresh bus, filtered to one
/// ``KeyringProbeTests`` method, and requires that child run to pass. Locking the shared keyring instead would
/// need a way to unlock it again, which gnome-keyring only offers through a prompt.
final class KeyringIsolatedBusTests: XCTestCase {
    override func setUp() async throws {
        try await KeyringTest.require()
    }

    /// Items of a locked collection are invisible (`load` returns nil, no error), `state()` says `.locked` so
    /// the broker reports "locked" instead of "not signed in", and `store` fails with `keyringLocked`.
    func testLockedKeyring() throws {
        try runProbe("testLockedKeyring", launcher: [KeyringTest.withKeyringScript])
    }

    /// A session bus on which nothing provides org.freedesktop.secrets: every call fails fast with
    /// `keyringUnavailable` and `state()` says `.absent`.
    func testNoSecretService() throws {
        try withBusConfig(repliesAllowed: true) { config in
            try runProbe("testNoSecretService", launcher: ["dbus-run-session", "--config-file=\(config)", "--"])
        }
    }

    /// A bus that never answers (its policy drops every reply, so even GDBus's `Hello` hangs, and that wait
    /// ignores the GCancellable): every call still answers at its deadline.
    func testUnresponsiveBus() throws {
        try withBusConfig(repliesAllowed: false) { config in
            try runProbe("testUnresponsiveBus", launcher: ["dbus-run-session", "--config-file=\(config)", "--"])
        }
    }

    /// A Secret Service that stalls mid-call (`Tests/Fixtures/secretservice/fake_secret_service.py`): a read whose
    /// `GetSecrets` is never answered, and an unlock, a create and a delete whose prompt never completes and whose
    /// `Dismiss` is never answered. Each fails at the store's deadline, and the next call, another account's read, is
    /// answered at once: the stalled call does not hold the keyring queue (issue 47; before, a read held it for GDBus's
    /// 25 s and a prompt for good).
    func testStalledSecretService() throws {
        let log = FileManager.default.temporaryDirectory.appendingPathComponent("auth-agent-fake-secrets-\(UUID()).log")
        defer { try? FileManager.default.removeItem(at: log) }
        try runProbe("testStalledSecretService", launcher: [
            "dbus-run-session", "--", "/usr/bin/python3", KeyringTest.fakeSecretService, log.path, "--",
        ])
        // The stalls were the service's: each call got as far as the method that stalls.
        let calls = try String(contentsOf: log, encoding: .utf8).split(separator: "\n").map(String.init)
        for call in ["GetSecrets stuck-read", "Unlock locked-read", "CreateItem new-write", "Delete confirm-delete"] {
            XCTAssertTrue(calls.contains(call), "the fake never saw \(call): \(calls)")
        }
        XCTAssertEqual(calls.filter { $0 == "Dismiss" }.count, 3, "\(calls)")
    }

    /// A session bus config with no service directories (nothing is activatable), so org.freedesktop.secrets
    /// has no owner. Without `<allow eavesdrop="true"/>` the default policy rejects every message to clients,
    /// replies included.
    private func withBusConfig(repliesAllowed: Bool, _ body: (String) throws -> Void) throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("auth-agent-bus-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let config = directory.appendingPathComponent("session.conf")
        try """
            <!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
             "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
            <busconfig>
              <type>session</type>
              <keep_umask/>
              <listen>unix:dir=\(directory.path)</listen>
              <auth>EXTERNAL</auth>
              <policy context="default">
                <allow send_destination="*" eavesdrop="true"/>
                \(repliesAllowed ? #"<allow eavesdrop="true"/>"# : "")
                <allow own="*"/>
              </policy>
            </busconfig>
            """.write(to: config, atomically: true, encoding: .utf8)
        try body(config.path)
    }

    /// No session bus at all (a dead address): the same answers as a bus without the service.
    func testNoSessionBus() throws {
        try runProbe("testNoSessionBus", launcher: [],
                     environment: ["DBUS_SESSION_BUS_ADDRESS": "unix:path=/nonexistent/auth-agent-test-bus"])
    }

    /// No `DBUS_SESSION_BUS_ADDRESS` and no X display (a service started outside a desktop session): GDBus
    /// cannot autolaunch a bus.
    func testNoSessionBusAddress() throws {
        try runProbe("testNoSessionBusAddress", launcher: [], removing: ["DBUS_SESSION_BUS_ADDRESS", "DISPLAY"])
    }

    private func runProbe(_ name: String, launcher: [String], environment: [String: String] = [:],
                          removing: [String] = [], file: StaticString = #filePath, line: UInt = #line) throws {
        var env = environment
        env["AUTH_AGENT_KEYRING_PROBE"] = name
        let result = try runProcess(
            launcher + [KeyringTest.testExecutable, "KeyringStoreTests.KeyringProbeTests/\(name)"],
            environment: env, removing: removing)
        let passed = result.status == 0 && result.output.contains("Executed 1 test, with 0 failures")
        XCTAssertTrue(passed, "probe \(name) failed (exit \(result.status)):\n\(result.output)", file: file, line: line)
    }
}

/// The child side of ``KeyringIsolatedBusTests``: each method runs only when that test starts it on its own bus
/// (`AUTH_AGENT_KEYRING_PROBE` names the method) and skips otherwise.
final class KeyringProbeTests: XCTestCase {
    private func requireProbe(_ name: String = #function) throws {
        let wanted = String(name.prefix { $0 != "(" })
        guard ProcessInfo.processInfo.environment["AUTH_AGENT_KEYRING_PROBE"] == wanted else {
            throw XCTSkip("runs only in a child process started by KeyringIsolatedBusTests.\(wanted)")
        }
    }

    func testLockedKeyring() async throws {
        try requireProbe()
        let store = LibsecretStore(timeout: .seconds(5))
        let key = KeyringTest.uniqueKey()
        try await store.store(Secret("hidden-while-locked"), for: key)

        let lock = try runProcess([
            "gdbus", "call", "--session", "--dest", "org.freedesktop.secrets",
            "--object-path", "/org/freedesktop/secrets", "--method", "org.freedesktop.Secret.Service.Lock",
            "['/org/freedesktop/secrets/collection/login']",
        ])
        XCTAssertEqual(lock.status, 0, lock.output)

        let state = await store.state()
        XCTAssertEqual(state, .locked)
        let loaded = try await store.load(key)
        XCTAssertNil(loaded, "a locked collection hides its items")
        // The attribute search answers without an unlock prompt (and here, locked after use, even lists the item:
        // attributes are not secret). Whether a locked keyring shows them varies, so the broker only trusts the
        // search when the keyring is unlocked.
        _ = try await store.storedKeys()
        let error = await assertThrows(.keyringLocked) { () async throws(AuthError) in
            try await store.store(Secret("new"), for: key)
        }
        XCTAssertFalse(error?.message.contains("new") ?? false)
        XCTAssertEqual(error?.keyringService.map { $0.hasSuffix("gnome-keyring-daemon") }, true, "\(String(describing: error))")
        XCTAssertEqual(error?.message, "the keyring is locked: unlock it (e.g. log in to the desktop session) and try again")
        // Delete cannot see the hidden item either: it says "locked" rather than "nothing deleted".
        await assertThrows(.keyringLocked) { () async throws(AuthError) in _ = try await store.delete(key) }
        let locked = await store.lockedError()
        XCTAssertEqual(locked.code, .keyringLocked)
    }

    func testNoSecretService() async throws {
        try requireProbe()
        try await assertUnavailable()
    }

    func testNoSessionBus() async throws {
        try requireProbe()
        try await assertUnavailable()
    }

    func testNoSessionBusAddress() async throws {
        try requireProbe()
        try await assertUnavailable()
    }

    func testUnresponsiveBus() async throws {
        try requireProbe()
        let store = LibsecretStore(timeout: .seconds(2))
        let key = KeyringTest.uniqueKey()
        var start = ContinuousClock.now
        let state = await store.state()
        XCTAssertEqual(state, .error)
        XCTAssertLessThan(milliseconds(since: start), 3500)
        // Queued behind the stuck `state` call: each still answers within its own 2 s.
        for _ in 0..<2 {
            start = .now
            let error = await assertThrows(.keyringError) { () async throws(AuthError) in try await store.load(key) }
            XCTAssertEqual(error?.message, "the keyring did not answer within 2 s (is an unlock prompt waiting?)")
            XCTAssertLessThan(milliseconds(since: start), 3500)
        }
        start = .now
        await assertThrows(.keyringError) { () async throws(AuthError) in
            try await store.store(Secret("never-stored"), for: key)
        }
        XCTAssertLessThan(milliseconds(since: start), 3500)
    }

    func testStalledSecretService() async throws {
        try requireProbe()
        let store = LibsecretStore(timeout: .seconds(2))
        func key(_ account: String) -> SecretKey {
            SecretKey(account: account, issuer: "https://issuer.test/realms/a", clientID: "client-1")
        }
        let stalls: [(String, () async throws(AuthError) -> Void)] = [
            ("a read whose GetSecrets is never answered", { () async throws(AuthError) in
                _ = try await store.load(key("stuck-read")) }),
            ("a read that must unlock the item", { () async throws(AuthError) in
                _ = try await store.load(key("locked-read")) }),
            ("a write that creates the item", { () async throws(AuthError) in
                try await store.store(Secret("never-stored"), for: key("new-write")) }),
            ("a delete", { () async throws(AuthError) in _ = try await store.delete(key("confirm-delete")) }),
        ]
        for (index, (what, stalled)) in stalls.enumerated() {
            var start = ContinuousClock.now
            let error = await assertThrows(.keyringError) { () async throws(AuthError) in try await stalled() }
            XCTAssertEqual(error?.message, "the keyring did not answer within 2 s (is an unlock prompt waiting?)", what)
            XCTAssertLessThan(milliseconds(since: start), 3000, what)
            // Another account, right after: answered by the service at once, not queued behind the stalled call
            // (which before held the queue for GDBus's 25 s, or for good, and this call timed out in its turn).
            start = .now
            do {
                let other = try await store.load(key("other-\(index)"))
                XCTAssertEqual(other?.reveal(), "secret-of-other-\(index)", what)
            } catch {
                XCTFail("after \(what), another account's read failed: \(error)")
            }
            XCTAssertLessThan(milliseconds(since: start), 1500, what)
        }
    }

    private func assertUnavailable(file: StaticString = #filePath, line: UInt = #line) async throws {
        let store = LibsecretStore(timeout: .seconds(5))
        let key = KeyringTest.uniqueKey()
        let start = ContinuousClock.now
        let state = await store.state()
        XCTAssertEqual(state, .absent, file: file, line: line)
        let service = await store.service()
        XCTAssertNil(service, "nobody owns org.freedesktop.secrets", file: file, line: line)
        let loadError = await assertThrows(.keyringUnavailable, file: file, line: line) {
            () async throws(AuthError) in try await store.load(key)
        }
        await assertThrows(.keyringUnavailable, file: file, line: line) { () async throws(AuthError) in
            try await store.store(Secret("never-stored"), for: key)
        }
        await assertThrows(.keyringUnavailable, file: file, line: line) { () async throws(AuthError) in
            try await store.storedKeys()
        }
        await assertThrows(.keyringUnavailable, file: file, line: line) { () async throws(AuthError) in
            try await store.delete(key)
        }
        print("probe: \(loadError?.message ?? "-"); four calls took \(milliseconds(since: start)) ms")
        XCTAssertLessThan(milliseconds(since: start), 2000, "a missing service must fail fast", file: file, line: line)
    }
}
