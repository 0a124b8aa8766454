import AuthCore
import Foundation
import CLibsecret
@testable import KeyringStore
import XCTest

/// ``LibsecretStore`` against a real gnome-keyring-daemon (see ``KeyringTest``). Each test uses its own key and
/// removes what it stored, so tests do not depend on each other or on order.
final class LibsecretStoreTests: XCTestCase {
    override func setUp() async throws {
        try await KeyringTest.require()
    }

    func testStoreLoadDeleteRoundTripIsVisibleToSecretTool() async throws {
        let store = LibsecretStore()
        let key = KeyringTest.uniqueKey()
        let secret = Secret("rt-\(UUID().uuidString)")

        try await store.store(secret, for: key)
        let loaded = try await store.load(key)
        XCTAssertEqual(loaded?.reveal(), secret.reveal())

        // Another Secret Service client finds it by attributes alone (no schema name).
        let lookup = try runProcess([
            "secret-tool", "lookup", "account", key.account, "issuer", key.issuer, "client_id", key.clientID,
        ])
        XCTAssertEqual(lookup.status, 0, lookup.output)
        XCTAssertEqual(lookup.output, secret.reveal())

        let deleted = try await store.delete(key)
        XCTAssertTrue(deleted)
        let afterDelete = try await store.load(key)
        XCTAssertNil(afterDelete)
        let lookupAfter = try runProcess([
            "secret-tool", "lookup", "account", key.account, "issuer", key.issuer, "client_id", key.clientID,
        ])
        XCTAssertNotEqual(lookupAfter.status, 0, "secret-tool still finds the item: \(lookupAfter.output)")
    }

    func testSecondStoreReplacesTheItem() async throws {
        let store = LibsecretStore()
        let key = KeyringTest.uniqueKey()
        try await store.store(Secret("first"), for: key)
        try await store.store(Secret("second"), for: key)

        let loaded = try await store.load(key)
        XCTAssertEqual(loaded?.reveal(), "second")
        let search = try runProcess([
            "secret-tool", "search", "--all",
            "account", key.account, "issuer", key.issuer, "client_id", key.clientID,
        ])
        XCTAssertEqual(search.status, 0, search.output)
        let items = search.output.split(separator: "\n").filter { $0.hasPrefix("label = ") }
        XCTAssertEqual(items, ["label = auth-agent refresh token for \(key.account) (\(key.issuer))"], search.output)
        XCTAssertTrue(search.output.contains("schema = dev.auth-agent.RefreshToken"), search.output)
        try await store.delete(key)
    }

    func testKeysDifferingOnlyInIssuerOrClientDoNotCollide() async throws {
        let store = LibsecretStore()
        let base = KeyringTest.uniqueKey()
        var otherIssuer = base
        otherIssuer.issuer = "https://issuer.test/realms/b"
        var otherClient = base
        otherClient.clientID = "client-2"
        let keys = [base, otherIssuer, otherClient]

        for (index, key) in keys.enumerated() { try await store.store(Secret("token-\(index)"), for: key) }
        for (index, key) in keys.enumerated() {
            let loaded = try await store.load(key)
            XCTAssertEqual(loaded?.reveal(), "token-\(index)", "\(key)")
        }
        let deleted = try await store.delete(otherIssuer)
        XCTAssertTrue(deleted)
        let stillThere = try await store.load(base)
        XCTAssertEqual(stillThere?.reveal(), "token-0")
        let alsoThere = try await store.load(otherClient)
        XCTAssertEqual(alsoThere?.reveal(), "token-2")
        for key in keys { try await store.delete(key) }
    }

    func testStoredKeysListsOurItemsByAttributesOnly() async throws {
        let store = LibsecretStore()
        let base = KeyringTest.uniqueKey()
        var otherClient = base
        otherClient.clientID = "client-2"
        var absent = base
        absent.issuer = "https://issuer.test/never-stored"
        try await store.store(Secret("token-a"), for: base)
        try await store.store(Secret("token-b"), for: otherClient)
        // An item of another schema with the same attribute names is not ours and must not be listed.
        var foreign = base
        foreign.account = "foreign-\(UUID().uuidString)"
        let other = try runProcess(["secret-tool", "store", "--label", "not auth-agent", "account", foreign.account,
                                    "issuer", foreign.issuer, "client_id", foreign.clientID], input: "foreign-secret")
        XCTAssertEqual(other.status, 0, other.output)

        var listed = try await store.storedKeys()
        XCTAssertTrue(listed.contains(base), "\(listed)")
        XCTAssertTrue(listed.contains(otherClient), "\(listed)")
        XCTAssertFalse(listed.contains(absent))
        XCTAssertFalse(listed.contains(foreign), "an item of another schema was listed")

        try await store.delete(otherClient)
        listed = try await store.storedKeys()
        XCTAssertTrue(listed.contains(base))
        XCTAssertFalse(listed.contains(otherClient), "a deleted item is still listed")
        try await store.delete(base)
        _ = try runProcess(["secret-tool", "clear", "account", foreign.account, "issuer", foreign.issuer,
                            "client_id", foreign.clientID])
    }

    func testStateIsAvailable() async throws {
        let state = await LibsecretStore().state()
        XCTAssertEqual(state, .available)
    }

    /// `doctor` names the program that owns org.freedesktop.secrets (here the test's gnome-keyring-daemon).
    func testServiceNamesTheProgramThatOwnsTheBusName() async throws {
        let service = await LibsecretStore().service()
        XCTAssertTrue(service?.program.hasSuffix("/gnome-keyring-daemon") ?? false, "\(String(describing: service))")
        XCTAssertTrue(service?.unlock.contains("Seahorse") ?? false, "the GNOME keyring's words")
    }

    /// Which product answers is this adapter's knowledge: KeePassXC by its program (or process name), in its words,
    /// and any other program in the GNOME keyring's.
    func testEachSecretServiceIsAdvisedInItsOwnWords() {
        for program in ["/usr/bin/keepassxc", "/tmp/.mount_KeePaX/usr/bin/keepassxc", "keepassxc"] {
            let service = LibsecretStore.secretService(program: program)
            XCTAssertTrue(service.unlock.hasPrefix("unlock the database in KeePassXC"), program)
            XCTAssertFalse(service.unlock.contains("Seahorse"), program)
            XCTAssertTrue(LibsecretStore.Inspection(raw: Int(AA_KEYRING_NO_DEFAULT_COLLECTION), service: service).state == .locked,
                          "KeePassXC with no database open hides the items: locked")
        }
        let gnome = LibsecretStore.secretService(program: "/usr/bin/gnome-keyring-daemon")
        XCTAssertEqual(gnome.unlock, "unlock the login keyring (log in again, or Seahorse); no restart needed")
        XCTAssertEqual(LibsecretStore.Inspection(raw: Int(AA_KEYRING_NO_DEFAULT_COLLECTION), service: gnome).state, .available,
                       "the GNOME keyring makes its login collection on the first write")
        let locked = LibsecretStore.Inspection(raw: Int(AA_KEYRING_NO_DEFAULT_COLLECTION),
                                               service: LibsecretStore.secretService(program: "/usr/bin/keepassxc")).lockedError
        XCTAssertTrue(locked.message.hasPrefix("KeePassXC answers as the Secret Service but has no database open"), locked.message)
        XCTAssertEqual(locked.keyringService, "/usr/bin/keepassxc")
    }

    func testLoadAndDeleteOfAMissingItem() async throws {
        let store = LibsecretStore()
        let key = KeyringTest.uniqueKey()
        let loaded = try await store.load(key)
        XCTAssertNil(loaded)
        let deleted = try await store.delete(key)
        XCTAssertFalse(deleted)
    }

    func testUnicodeAndLongSecretRoundTrips() async throws {
        let store = LibsecretStore()
        var key = KeyringTest.uniqueKey()
        key.account += "-ünï-账户"
        let unit = "aé€😀~"  // 1 + 2 + 3 + 4 + 1 bytes
        let value = String(repeating: unit, count: 4096 / unit.utf8.count + 1)
        XCTAssertGreaterThanOrEqual(value.utf8.count, 4096)

        try await store.store(Secret(value), for: key)
        let loaded = try await store.load(key)
        XCTAssertEqual(loaded?.reveal(), value)
        try await store.delete(key)
    }

    /// Not a benchmark: prints typical latencies for the report and catches a pathological slowdown.
    func testTimings() async throws {
        let store = LibsecretStore()
        let key = KeyringTest.uniqueKey()
        let rounds = 20
        var storeMs = 0.0, loadMs = 0.0, deleteMs = 0.0, stateMs = 0.0
        for round in 0..<rounds {
            var start = ContinuousClock.now
            try await store.store(Secret("token-\(round)"), for: key)
            storeMs += milliseconds(since: start)
            start = .now
            _ = try await store.load(key)
            loadMs += milliseconds(since: start)
            start = .now
            _ = await store.state()
            stateMs += milliseconds(since: start)
            start = .now
            try await store.delete(key)
            deleteMs += milliseconds(since: start)
        }
        let mean = { (total: Double) in String(format: "%.1f ms", total / Double(rounds)) }
        print("keyring timings over \(rounds) rounds: store \(mean(storeMs)), load \(mean(loadMs)), "
              + "state \(mean(stateMs)), delete \(mean(deleteMs))")
        XCTAssertLessThan(storeMs / Double(rounds), 1000)
    }

    /// A stopped daemon (or an unanswered unlock prompt) must not hang the agent: every call gives up at the
    /// timeout with `keyringError`, and the store works again once the daemon runs.
    func testStoppedDaemonTimesOut() async throws {
        let daemon = try secretServicePID()
        let key = KeyringTest.uniqueKey()
        let store = LibsecretStore(timeout: .seconds(2))
        try await store.store(Secret("before-stop"), for: key)

        XCTAssertEqual(kill(daemon, SIGSTOP), 0)
        var resumed = false
        defer { if !resumed { kill(daemon, SIGCONT) } }

        var start = ContinuousClock.now
        let error = await assertThrows(.keyringError) { () async throws(AuthError) in try await store.load(key) }
        var elapsed = milliseconds(since: start)
        XCTAssertEqual(error?.message, "the keyring did not answer within 2 s (is an unlock prompt waiting?)")
        XCTAssertGreaterThanOrEqual(elapsed, 1900)
        XCTAssertLessThan(elapsed, 4000)
        print(String(format: "stopped daemon: load gave up after %.0f ms", elapsed))

        start = .now
        let state = await store.state()
        elapsed = milliseconds(since: start)
        XCTAssertEqual(state, .error)
        XCTAssertLessThan(elapsed, 4000)

        // Calls queued behind a stuck one share the deadline of their own start, not one after the other.
        start = .now
        let first = Task { () async -> Result<Void, AuthError> in
            do throws(AuthError) { return .success(try await store.store(Secret("x"), for: key)) } catch {
                return .failure(error)
            }
        }
        let second = Task { () async -> Result<Secret?, AuthError> in
            do throws(AuthError) { return .success(try await store.load(key)) } catch { return .failure(error) }
        }
        await assertThrows(.keyringError) { () async throws(AuthError) in try await first.value.get() }
        await assertThrows(.keyringError) { () async throws(AuthError) in try await second.value.get() }
        XCTAssertLessThan(milliseconds(since: start), 4000)

        XCTAssertEqual(kill(daemon, SIGCONT), 0)
        resumed = true
        let state2 = await store.state()
        XCTAssertEqual(state2, .available)
        let loaded = try await store.load(key)
        // The timed-out store above may or may not have reached the daemon before it was cancelled.
        XCTAssertTrue(["before-stop", "x"].contains(loaded?.reveal()), "unexpected value after resume")
        try await store.delete(key)
    }

    /// The pid of the process that owns org.freedesktop.secrets on this (private) bus: the daemon
    /// `scripts/with-keyring` started, never another user's or another run's.
    private func secretServicePID() throws -> pid_t {
        let reply = try runProcess([
            "gdbus", "call", "--session", "--dest", "org.freedesktop.DBus", "--object-path", "/org/freedesktop/DBus",
            "--method", "org.freedesktop.DBus.GetConnectionUnixProcessID", "org.freedesktop.secrets",
        ])
        XCTAssertEqual(reply.status, 0, reply.output)
        // "(uint32 12345,)"
        let digits = reply.output.split(separator: " ").last?.filter(\.isNumber) ?? ""
        let pid = try XCTUnwrap(pid_t(digits), reply.output)
        let comm = try String(contentsOfFile: "/proc/\(pid)/comm", encoding: .utf8)
        XCTAssertTrue(comm.hasPrefix("gnome-keyring"), "org.freedesktop.secrets is owned by \(comm)")
        return pid
    }
}
