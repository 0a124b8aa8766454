import AgentIPC
@testable import AgentAccess
import AuthCore
import Foundation
import Logging
import Synchronization
import XCTest

/// Issue 55: grants' lifecycle (made, served, ended, kept for the next run) against a recording front end, and the
/// policy a grant's caller is judged by. The sockets themselves and real containers: e2e/test_grants.py.
final class GrantsTests: XCTestCase {
    final class Clock: Sendable {
        let value = Atomic<Int>(1_800_000_000)
        var now: @Sendable () -> Int { { [self] in value.load(ordering: .relaxed) } }
    }

    var directory = ""

    override func setUpWithError() throws {
        directory = NSTemporaryDirectory() + "grants-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(atPath: directory)
    }

    func grants(_ clock: Clock) -> (Grants, RecordingDoors) {
        let grants = Grants(directory: directory, logger: Logger(label: "test"), now: clock.now)
        let listeners = RecordingDoors()
        grants.attach(listeners)
        return (grants, listeners)
    }

    func testAGrantIsServedUntilItsTimeAndThenItsCallerIsRefused() throws {
        let clock = Clock()
        let (grants, listeners) = grants(clock)
        let grant = try grants.create(name: "ci", accounts: ["work"], lifetime: 60, whilePID: nil)
        XCTAssertEqual(grant.socketPath, "\(directory)/ci/socket")
        XCTAssertEqual(grant.expires, 1_800_000_060)
        XCTAssertEqual(listeners.events.withLock { $0 }, ["listen grant:ci \(directory)/ci/socket"])

        let caller = Caller(pid: getpid(), uid: getuid(), via: "socket", exe: "/usr/bin/curl")
        let admitted = try grants.admit(caller, grant: "ci").get()
        XCTAssertEqual(admitted.via, "grant:ci")
        XCTAssertEqual(admitted.identity.grantName, "ci")
        XCTAssertTrue(admitted.identity.isConfined)
        XCTAssertNil(admitted.identity.consentKey, "a grant's caller is never asked about, so never remembered")
        XCTAssertEqual(AccessPolicy.decide(admitted.identity, account: "work"), .grant(.granted))
        XCTAssertEqual(AccessPolicy.decide(admitted.identity, account: "personal"), .deny(.notGranted))
        XCTAssertNil(AccessPolicy.decide(caller.identity, account: "work"), "any other caller is judged by the policy")
        XCTAssertEqual(AccessPolicy(allowedClients: []).decide(admitted.identity, remembered: true), .deny(.notGranted))
        XCTAssertEqual(admitted.wire.kind, "grant")
        XCTAssertTrue(admitted.described().hasPrefix("grant ci"), admitted.described())

        clock.value.store(1_800_000_060, ordering: .relaxed)
        XCTAssertNil(grants.live("ci"), "ended at its time, even before its timer acted")
        guard case .failure(let refused) = grants.admit(caller, grant: "ci") else { return XCTFail("admitted after its time") }
        XCTAssertEqual(refused.code, ErrorCode.permissionDenied.rawValue)
    }

    func testMakingAGrantIsChecked() throws {
        let (grants, _) = grants(Clock())
        for (name, accounts, lifetime, pid) in [("../x", ["work"], nil, nil), ("", ["work"], nil, nil), (".hidden", ["work"], nil, nil),
                                               (String(repeating: "a", count: 33), ["work"], nil, nil),
                                               ("ok", [], nil, nil), ("ok", ["work"], 0, nil),
                                               ("ok", ["work"], Grants.maxLifetime + 1, nil), ("ok", ["work"], nil, Int32.max)]
            as [(String, [String], Int?, Int32?)] {
            XCTAssertThrowsError(try grants.create(name: name, accounts: accounts, lifetime: lifetime, whilePID: pid),
                                 "\(name) \(accounts) \(String(describing: lifetime)) \(String(describing: pid))")
        }
        _ = try grants.create(name: "ci", accounts: ["work"], lifetime: nil, whilePID: nil)
        XCTAssertThrowsError(try grants.create(name: "ci", accounts: ["work"], lifetime: nil, whilePID: nil)) {
            XCTAssertTrue(($0 as? WireError)?.message.contains("exists") == true)
        }
    }

    func testRevokingClosesTheSocketAndForgetsTheGrant() throws {
        let (grants, listeners) = grants(Clock())
        _ = try grants.create(name: "ci", accounts: ["work"], lifetime: nil, whilePID: getpid())
        XCTAssertEqual(grants.revoke("ci", because: "test")?.name, "ci")
        XCTAssertNil(grants.revoke("ci", because: "test"))
        XCTAssertEqual(listeners.events.withLock { $0 }, ["listen grant:ci \(directory)/ci/socket", "watch \(getpid())", "close grant:ci"])
        XCTAssertTrue(grants.isEmpty)
        XCTAssertFalse(FileManager.default.fileExists(atPath: "\(directory)/grants.json"), "no grants, no file")
    }

    /// A workload that wrote into its grant's directory (a writable mount) and still holds that mount must not
    /// reach a later grant of the same name: the ended grant's directory is moved aside and emptied, never reused,
    /// and nothing a link in it points at is touched.
    func testAnEndedGrantsDirectoryIsNeverGivenToTheNextGrantOfItsName() throws {
        let (grants, _) = grants(Clock())
        _ = try grants.create(name: "ci", accounts: ["work"], lifetime: nil, whilePID: nil)
        let path = "\(directory)/ci"
        let outside = "\(directory)/outside"
        try "keep".write(toFile: outside, atomically: false, encoding: .utf8)
        try "left".write(toFile: "\(path)/keep", atomically: false, encoding: .utf8)
        try FileManager.default.createDirectory(atPath: "\(path)/deep/er", withIntermediateDirectories: true)
        try "x".write(toFile: "\(path)/deep/er/file", atomically: false, encoding: .utf8)
        XCTAssertEqual(symlink(outside, "\(path)/link"), 0)
        XCTAssertEqual(symlink(directory, "\(path)/deep/up"), 0)
        let held = open(path, O_RDONLY | O_DIRECTORY)  // the workload's mount
        XCTAssertGreaterThanOrEqual(held, 0)
        defer { close(held) }
        var old = stat()
        XCTAssertEqual(fstat(held, &old), 0)

        grants.revoke("ci", because: "test")
        XCTAssertFalse(FileManager.default.fileExists(atPath: path))
        XCTAssertEqual(try String(contentsOfFile: outside, encoding: .utf8), "keep", "a link's target is never touched")
        let left = try FileManager.default.contentsOfDirectory(atPath: directory)
        XCTAssertEqual(Set(left), ["outside"], "moved aside and emptied: \(left)")
        var gone = stat()
        XCTAssertEqual(fstat(held, &gone), 0)
        XCTAssertEqual(gone.st_nlink, 0, "the held directory is deleted")

        _ = try grants.create(name: "ci", accounts: ["work"], lifetime: nil, whilePID: nil)
        var new = stat()
        XCTAssertEqual(stat(path, &new), 0)
        XCTAssertNotEqual(new.st_ino, old.st_ino, "a new directory, not the held one")
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: path), [])
    }

    /// What an earlier run left at a new grant's path (an agent killed before it could empty it) is moved aside
    /// too, and what earlier runs moved aside is removed when grants are read again.
    func testANewGrantNeverTakesADirectoryLeftAtItsPath() throws {
        let path = "\(directory)/ci"
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        try "left".write(toFile: "\(path)/keep", atomically: false, encoding: .utf8)
        try FileManager.default.createDirectory(atPath: "\(directory)/.ended-0123", withIntermediateDirectories: true)
        try "old".write(toFile: "\(directory)/.ended-0123/file", atomically: false, encoding: .utf8)
        let (grants, _) = grants(Clock())
        XCTAssertFalse(FileManager.default.fileExists(atPath: "\(directory)/.ended-0123"), "swept when grants are read")
        _ = try grants.create(name: "ci", accounts: ["work"], lifetime: nil, whilePID: nil)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: path), [])
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: directory).sorted(), ["ci", "grants.json"])
    }

    func testAGrantCannotBeNamedAsTheGrantsOwnFile() {
        let (grants, _) = grants(Clock())
        for name in ["grants.json", "grants.json.new"] {
            XCTAssertThrowsError(try grants.create(name: name, accounts: ["work"], lifetime: nil, whilePID: nil), name)
        }
        XCTAssertTrue(Grants.isValidName("grants"))
    }

    func testWhatWasMadeWithAGrantIsToldOfItsEndHoweverItEnds() throws {
        let clock = Clock()
        let ended = Mutex<[String]>([])
        let (first, _) = grants(clock)
        first.whenEnded { grant in ended.withLock { $0.append(grant.name) } }
        _ = try first.create(name: "revoked", accounts: ["work"], lifetime: nil, whilePID: nil, scopes: ["read"], ownSignIns: ["work"])
        _ = try first.create(name: "short", accounts: ["work"], lifetime: 10, whilePID: nil, scopes: ["read"], ownSignIns: ["work"],
                             maxTTL: 60)
        first.revoke("revoked", because: "test")
        XCTAssertEqual(ended.withLock { $0 }, ["revoked"])

        // The next run finds "short" ended while no agent ran: its end is told as the grants are read again.
        clock.value.store(1_800_000_100, ordering: .relaxed)
        let next = Grants(directory: directory, logger: Logger(label: "test"), now: clock.now)
        next.whenEnded { grant in ended.withLock { $0.append("\(grant.name) \(grant.ownSignIns ?? []) \(grant.maxTTL ?? 0)") } }
        next.attach(RecordingDoors())
        XCTAssertEqual(ended.withLock { $0 }, ["revoked", "short [\"work\"] 60"], "with what it was made with, kept for the next run")
        XCTAssertTrue(next.isEmpty)
    }

    func testTheNextRunServesTheGrantsThatStillLastAndDropsTheOthers() throws {
        let clock = Clock()
        let (first, _) = grants(clock)
        _ = try first.create(name: "short", accounts: ["work"], lifetime: 10, whilePID: nil)
        _ = try first.create(name: "long", accounts: ["work", "personal"], lifetime: 3600, whilePID: nil)
        _ = try first.create(name: "forever", accounts: ["work"], lifetime: nil, whilePID: nil,
                             scopes: ["repo", "read", "repo"], resource: "https://api.example")
        let file = try String(contentsOfFile: "\(directory)/grants.json", encoding: .utf8)
        XCTAssertFalse(file.contains("uses"), "what is kept is the grant, not its use")

        clock.value.store(1_800_000_100, ordering: .relaxed)
        let (next, listeners) = grants(clock)
        XCTAssertEqual(next.list().map(\.name), ["forever", "long"], "made at the same time: by name")
        XCTAssertEqual(next.list().first { $0.name == "long" }?.accounts, ["work", "personal"])
        let forever = try XCTUnwrap(next.list().first { $0.name == "forever" })
        XCTAssertEqual(forever.scopes, ["read", "repo"], "kept narrowed: sorted, each once")
        XCTAssertEqual(forever.resource, "https://api.example")
        XCTAssertNil(next.list().first { $0.name == "long" }?.scopes)
        XCTAssertEqual(Set(listeners.events.withLock { $0 }), ["listen grant:long \(directory)/long/socket",
                                                              "listen grant:forever \(directory)/forever/socket"])
    }

    func testAContainersEngineAndIDAreReadFromItsScope() {
        XCTAssertEqual(Grants.container(unit: "libpod-0123456789abcdef0123456789abcdef.scope"), "podman 0123456789ab")
        XCTAssertEqual(Grants.container(unit: "docker-fedcba9876543210.scope"), "docker fedcba987654")
        XCTAssertNil(Grants.container(unit: "libpod-conmon-xyz.scope"))
        XCTAssertNil(Grants.container(unit: "app-gnome-foo-1.scope"))
        XCTAssertNil(Grants.container(unit: "docker-.scope"))
    }

    func testALockedSessionRefusesWhatLocksWithItOnly() throws {
        let gate = AccessGate(policies: ["work": AccessPolicy(lockWithSession: true)], logger: Logger(label: "test"))
        let me = Caller(pid: getpid(), uid: getuid(), via: "socket", exe: "/usr/bin/curl")
        var locking = me, plain = me
        locking.identity.kind = .granted(.init(name: "a", accounts: ["personal"], lockWithSession: true))
        plain.identity.kind = .granted(.init(name: "b", accounts: ["personal"]))
        func verdicts() -> [AccessPolicy.Verdict] {
            [gate.verdict(me, account: "work"), gate.verdict(me, account: "personal"),
             gate.verdict(locking, account: "personal"), gate.verdict(plain, account: "personal")]
        }
        let served: [AccessPolicy.Verdict] = [.grant(.open), .grant(.open), .grant(.granted), .grant(.granted)]
        let locked: [AccessPolicy.Verdict] = [.deny(.sessionLocked), .grant(.open), .deny(.sessionLocked), .grant(.granted)]
        XCTAssertEqual(verdicts(), served)
        gate.sessionLock.setHint(nil)
        XCTAssertEqual(verdicts(), served, "a hint that cannot be read locks nothing")
        gate.sessionLock.setHint(true)
        XCTAssertEqual(verdicts(), locked)
        XCTAssertEqual(gate.sessionLock.lockedBy, "the screen locker (logind)")
        gate.sessionLock.setManual(true)
        gate.sessionLock.setHint(false)
        XCTAssertEqual(verdicts(), locked)
        XCTAssertEqual(gate.sessionLock.lockedBy, "`authctl lock`")
        gate.sessionLock.setManual(false)
        XCTAssertEqual(verdicts(), served)
        XCTAssertNil(gate.sessionLock.lockedBy)
    }

    /// Podman with the cgroupfs manager (Debian 12's podman as root in a container without systemd, cgroup v1 beside
    /// a mounted cgroup2): no unit, the id is the cgroup's name on every hierarchy.
    func testAPodmanContainerIsReadFromItsCgroupfsPath() {
        let id = "0eee257a69b599bf7deb24a7710c9332901ad127ba57fb6a5d73a9666923e44b"
        let cgroup = ["9:name=systemd", "4:memory", "0:"].map { "\($0):/libpod_parent/libpod-\(id)\n" }.joined()
        XCTAssertNil(ProcFS.unit(cgroup: cgroup))
        XCTAssertEqual(Grants.container(cgroup: cgroup), "podman 0eee257a69b5")
        XCTAssertNil(Grants.container(cgroup: "9:name=systemd:/libpod_parent/conmon\n0::/libpod_parent/conmon\n"))
        XCTAssertNil(Grants.container(cgroup: "9:name=systemd:/\n4:memory:/process_api/c27c20a43a9e\n0::/\n"))
        XCTAssertNil(Grants.container(cgroup: "0::/libpod_parent/libpod-xyz\n"))
        XCTAssertNil(Grants.container(cgroup: "0::/libpod_parent/libpod-\n"))
    }
}
