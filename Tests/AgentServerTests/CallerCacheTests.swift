@testable import AgentServer
@testable import AgentService
import AuthCore
import Foundation
import XCTest

/// ``CallerCache`` with real processes: a reconnecting process reuses what was read about it, but never across an
/// `execve` of another binary, a replaced file, or another process that got the same pid.
final class CallerCacheTests: ChildProcessTestCase {
    func peer(_ child: Process) -> PeerCredentials { PeerCredentials(pid: child.processIdentifier, uid: getuid(), gid: getgid()) }

    /// Waits (bounded) until `pid` runs `exe`.
    func waitForExecutable(_ pid: Int32, _ exe: String) {
        for _ in 0..<500 where Caller.executable(of: pid) != exe { usleep(10_000) }
        XCTAssertEqual(Caller.executable(of: pid), exe)
    }

    func testASecondConnectionOfTheSameProcessReusesItsIdentity() throws {
        let cache = CallerCache()
        let child = try spawn("/usr/bin/sleep", ["60"])
        waitForExecutable(child.processIdentifier, "/usr/bin/sleep")
        let first = Caller.identify(peer: peer(child), via: "socket", cache: cache)
        XCTAssertEqual(cache.count, 1)
        XCTAssertEqual(cache.hits.load(ordering: .relaxed), 0)
        let second = Caller.identify(peer: peer(child), via: "socket", cache: cache)
        XCTAssertEqual(cache.hits.load(ordering: .relaxed), 1)
        XCTAssertEqual(second.identity, first.identity)
        XCTAssertEqual(second.identity.exe, "/usr/bin/sleep")
        XCTAssertEqual(second.identity.unit, Caller.identify(peer: peer(child), via: "socket").identity.unit,
                       "the same unit as a full read")
        XCTAssertTrue(second.isStillConnectedProcess)
    }

    func testAnExecOfAnotherBinaryIsReadAfresh() throws {
        let cache = CallerCache()
        // The shell runs first (identified and cached), then replaces itself with sleep: same pid, same start time.
        let marker = directory.appendingPathComponent("go").path
        let child = try spawn("/bin/sh", ["-c", "while [ ! -e '\(marker)' ]; do :; done; exec /usr/bin/sleep 60"])
        let shell = try XCTUnwrap(Caller.executable(of: child.processIdentifier))
        let before = Caller.identify(peer: peer(child), via: "socket", cache: cache)
        XCTAssertEqual(before.identity.exe, shell)
        FileManager.default.createFile(atPath: marker, contents: nil)
        waitForExecutable(child.processIdentifier, "/usr/bin/sleep")
        let after = Caller.identify(peer: peer(child), via: "socket", cache: cache)
        XCTAssertEqual(after.process?.startTime, before.process?.startTime, "the same process")
        XCTAssertEqual(after.identity.exe, "/usr/bin/sleep", "the cached shell identity was not reused after exec")
        XCTAssertEqual(cache.hits.load(ordering: .relaxed), 0)
    }

    func testAReplacedFileIsNoticedOnACachedIdentity() throws {
        let cache = CallerCache()
        let copy = directory.appendingPathComponent("sleep-copy").path
        try FileManager.default.copyItem(atPath: "/usr/bin/sleep", toPath: copy)
        let child = try spawn(copy, ["60"])
        waitForExecutable(child.processIdentifier, copy)
        XCTAssertFalse(Caller.identify(peer: peer(child), via: "socket", cache: cache).identity.exeDeleted)
        try FileManager.default.removeItem(atPath: copy)
        try FileManager.default.copyItem(atPath: "/usr/bin/true", toPath: copy)
        let replaced = Caller.identify(peer: peer(child), via: "socket", cache: cache)
        XCTAssertEqual(cache.hits.load(ordering: .relaxed), 1, "the process still runs the same (now unlinked) file")
        XCTAssertTrue(replaced.identity.exeDeleted, "the path no longer names what runs")
    }

    func testAnEntryForAnotherProcessWithTheSamePidIsNotUsed() throws {
        let cache = CallerCache()
        let me = getpid()
        let exe = try XCTUnwrap(FileID(path: "/proc/\(me)/exe"))
        let started = try XCTUnwrap(Caller.readText("/proc/\(me)/stat").flatMap(ProcFS.startTime(stat:)))
        // An earlier process with our pid (older start time) that ran as a listed client.
        cache.store(pid: me, startTime: started - 1, executable: exe,
                    CallerCache.Derived(exe: "/usr/bin/git", exeDeleted: false, unit: "mbsync.service", flatpakApp: nil))
        let caller = Caller.identify(peer: PeerCredentials(pid: me, uid: getuid(), gid: getgid()), via: "socket", cache: cache)
        XCTAssertNotEqual(caller.identity.exe, "/usr/bin/git")
        XCTAssertNotEqual(caller.identity.unit, "mbsync.service")
        XCTAssertEqual(cache.hits.load(ordering: .relaxed), 0)
    }

    /// With a pidfd on pidfs (Linux 6.9+), a reconnecting process is found by its process id: the start time and
    /// terminal come from the first read, and the identity is the same as a full read's.
    func testWithAPidfdAReconnectingProcessIsFoundByItsProcessID() throws {
        let cache = CallerCache()
        let child = try spawn("/usr/bin/sleep", ["60"])
        waitForExecutable(child.processIdentifier, "/usr/bin/sleep")
        let pidfd = try XCTUnwrap(ProcessFD.open(pid: child.processIdentifier))
        try XCTSkipIf(pidfd.processID == nil, "pidfds are not on pidfs on this kernel")
        let first = Caller.identify(peer: peer(child), via: "socket", pidfd: pidfd, cache: cache)
        let again = try XCTUnwrap(ProcessFD.open(pid: child.processIdentifier))
        let second = Caller.identify(peer: peer(child), via: "socket", pidfd: again, cache: cache)
        XCTAssertEqual(cache.hits.load(ordering: .relaxed), 1)
        XCTAssertEqual(second.identity, first.identity)
        XCTAssertEqual(second.identity.exe, "/usr/bin/sleep")
        XCTAssertEqual(second.process, first.process, "the start time read at the first connection")
        XCTAssertEqual(second.hasTerminal, first.hasTerminal)
        XCTAssertTrue(second.isStillConnectedProcess)
    }

    /// An entry stored under another process id (another process that had this pid) is not used, even when the
    /// executable is the same file.
    func testAnEntryWithAnotherProcessIDIsNotUsed() throws {
        let cache = CallerCache()
        let me = getpid()
        let pidfd = try XCTUnwrap(ProcessFD.open(pid: me))
        let id = try XCTUnwrap(pidfd.processID, "pidfds are not on pidfs on this kernel")
        let exe = try XCTUnwrap(FileID(path: "/proc/\(me)/exe"))
        cache.store(pid: me, startTime: 1, processID: id + 1, executable: exe,
                    CallerCache.Derived(exe: "/usr/bin/git", exeDeleted: false, unit: "mbsync.service", flatpakApp: nil),
                    hasTerminal: true)
        let caller = Caller.identify(peer: PeerCredentials(pid: me, uid: getuid(), gid: getgid()), via: "socket",
                                     pidfd: pidfd, cache: cache)
        XCTAssertNotEqual(caller.identity.exe, "/usr/bin/git")
        XCTAssertEqual(cache.hits.load(ordering: .relaxed), 0)
        XCTAssertNotEqual(caller.process?.startTime, 1, "the start time was read, not taken from the other entry")
    }

    /// With a pidfd, an `execve` keeps the process id but not the executable: read afresh.
    func testWithAPidfdAnExecOfAnotherBinaryIsReadAfresh() throws {
        let cache = CallerCache()
        let marker = directory.appendingPathComponent("go").path
        let child = try spawn("/bin/sh", ["-c", "while [ ! -e '\(marker)' ]; do :; done; exec /usr/bin/sleep 60"])
        let shell = try XCTUnwrap(Caller.executable(of: child.processIdentifier))
        let pidfd = try XCTUnwrap(ProcessFD.open(pid: child.processIdentifier))
        try XCTSkipIf(pidfd.processID == nil, "pidfds are not on pidfs on this kernel")
        XCTAssertEqual(Caller.identify(peer: peer(child), via: "socket", pidfd: pidfd, cache: cache).identity.exe, shell)
        _ = FileManager.default.createFile(atPath: marker, contents: nil)
        waitForExecutable(child.processIdentifier, "/usr/bin/sleep")
        let after = Caller.identify(peer: peer(child), via: "socket", pidfd: pidfd, cache: cache)
        XCTAssertEqual(after.identity.exe, "/usr/bin/sleep", "the cached shell identity was reused after exec")
        XCTAssertEqual(cache.hits.load(ordering: .relaxed), 0)
    }

    // MARK: - Pinned processes (a connection's place in the accept queue, /proc/PID held)

    /// Identifies `child` as a connection accepted at `accepted`; `askedForPidfd` says whether the pidfd was needed.
    func identify(_ child: Process, accepted: UInt64, cache: CallerCache) -> (caller: Caller, askedForPidfd: Bool) {
        var asked = false
        let caller = Caller.identify(peer: peer(child), via: "socket",
                                     pidfd: { asked = true; return ProcessFD.open(pid: child.processIdentifier) }(),
                                     cache: cache, accepted: accepted)
        return (caller, asked)
    }

    func skipWithoutPidfs() throws {
        let probe = try XCTUnwrap(ProcessFD.open(pid: getpid()))
        try XCTSkipIf(probe.processID == nil, "pidfds are not on pidfs on this kernel")
    }

    /// A later connection of a pinned process is identified without a pidfd, and as a full read would.
    func testALaterConnectionOfAPinnedProcessNeedsNoPidfd() throws {
        try skipWithoutPidfs()
        let cache = CallerCache()
        let child = try spawn("/usr/bin/sleep", ["60"])
        waitForExecutable(child.processIdentifier, "/usr/bin/sleep")
        let first = identify(child, accepted: 1, cache: cache)
        XCTAssertTrue(first.askedForPidfd)
        XCTAssertEqual(cache.pinCount, 1)
        let second = identify(child, accepted: 2, cache: cache)
        XCTAssertFalse(second.askedForPidfd, "identified through the held /proc/PID")
        XCTAssertEqual(cache.pinnedHits.load(ordering: .relaxed), 1)
        XCTAssertEqual(second.caller.identity, first.caller.identity)
        XCTAssertEqual(second.caller.identity.exe, "/usr/bin/sleep")
        XCTAssertEqual(second.caller.process, first.caller.process)
        XCTAssertEqual(second.caller.hasTerminal, first.caller.hasTerminal)
        XCTAssertTrue(second.caller.isStillConnectedProcess)
    }

    /// A connection that left the queue before (or with) the one the pin was read for may come from an earlier
    /// holder of the pid: the pin says nothing about it, and the full read with a pidfd decides.
    func testAPinIsNotUsedForAConnectionAcceptedBeforeIt() throws {
        try skipWithoutPidfs()
        let cache = CallerCache()
        let child = try spawn("/usr/bin/sleep", ["60"])
        waitForExecutable(child.processIdentifier, "/usr/bin/sleep")
        _ = identify(child, accepted: 5, cache: cache)
        XCTAssertTrue(identify(child, accepted: 5, cache: cache).askedForPidfd, "the same position")
        // Read in full (and pinned again, at 4: that connection came from this process as well).
        XCTAssertTrue(identify(child, accepted: 4, cache: cache).askedForPidfd, "an earlier position")
        XCTAssertTrue(identify(child, accepted: 3, cache: cache).askedForPidfd, "earlier than the new pin")
        XCTAssertEqual(cache.pinnedHits.load(ordering: .relaxed), 0)
        XCTAssertFalse(identify(child, accepted: 6, cache: cache).askedForPidfd)
    }

    /// Without a queue position (D-Bus, tests) nothing is pinned.
    func testWithoutAQueuePositionNothingIsPinned() throws {
        try skipWithoutPidfs()
        let cache = CallerCache()
        let child = try spawn("/usr/bin/sleep", ["60"])
        waitForExecutable(child.processIdentifier, "/usr/bin/sleep")
        _ = Caller.identify(peer: peer(child), via: "socket", pidfd: ProcessFD.open(pid: child.processIdentifier), cache: cache)
        XCTAssertEqual(cache.count, 1)
        XCTAssertEqual(cache.pinCount, 0)
    }

    /// The pinned process exits: a connection with its pid is not served from the pin (whoever has the pid now is
    /// someone else), the entry goes, and what the full read finds is nothing (the process that connected is gone).
    func testAnExitedPinnedProcessIsNotUsedAndIsUnpinned() throws {
        try skipWithoutPidfs()
        let cache = CallerCache()
        let child = try spawn("/usr/bin/sleep", ["60"])
        waitForExecutable(child.processIdentifier, "/usr/bin/sleep")
        // The pidfd of the connection made while it ran: it stays the exited process's.
        let pidfd = try XCTUnwrap(ProcessFD.open(pid: child.processIdentifier))
        _ = identify(child, accepted: 1, cache: cache)
        XCTAssertEqual(cache.pinCount, 1)
        kill(child.processIdentifier, SIGKILL)
        child.waitUntilExit()
        let after = Caller.identify(peer: peer(child), via: "socket", pidfd: pidfd, cache: cache, accepted: 2)
        XCTAssertEqual(cache.pinnedHits.load(ordering: .relaxed), 0)
        XCTAssertEqual(cache.pinCount, 0, "unpinned")
        XCTAssertNil(after.identity.exe)
        XCTAssertFalse(after.isStillConnectedProcess)
    }

    /// An `execve` of another binary keeps the pid and the held directory, not the executable: read afresh.
    func testAPinnedProcessThatRunsAnotherBinaryIsReadAfresh() throws {
        try skipWithoutPidfs()
        let cache = CallerCache()
        let marker = directory.appendingPathComponent("go").path
        let child = try spawn("/bin/sh", ["-c", "while [ ! -e '\(marker)' ]; do :; done; exec /usr/bin/sleep 60"])
        let shell = try XCTUnwrap(Caller.executable(of: child.processIdentifier))
        XCTAssertEqual(identify(child, accepted: 1, cache: cache).caller.identity.exe, shell)
        _ = FileManager.default.createFile(atPath: marker, contents: nil)
        waitForExecutable(child.processIdentifier, "/usr/bin/sleep")
        let after = identify(child, accepted: 2, cache: cache)
        XCTAssertTrue(after.askedForPidfd)
        XCTAssertEqual(after.caller.identity.exe, "/usr/bin/sleep", "the pinned shell identity was reused after exec")
        XCTAssertEqual(cache.pinnedHits.load(ordering: .relaxed), 0)
        XCTAssertFalse(identify(child, accepted: 3, cache: cache).askedForPidfd, "pinned again, as sleep")
    }

    /// A file replaced at the path (the running one unlinked) ends the pin's shortcut: read in full, and the
    /// identity says so.
    func testAReplacedFileIsNoticedOnAPinnedIdentity() throws {
        try skipWithoutPidfs()
        let cache = CallerCache()
        let copy = directory.appendingPathComponent("sleep-copy").path
        try FileManager.default.copyItem(atPath: "/usr/bin/sleep", toPath: copy)
        let child = try spawn(copy, ["60"])
        waitForExecutable(child.processIdentifier, copy)
        XCTAssertFalse(identify(child, accepted: 1, cache: cache).caller.identity.exeDeleted)
        XCTAssertFalse(identify(child, accepted: 2, cache: cache).askedForPidfd)
        try FileManager.default.removeItem(atPath: copy)
        try FileManager.default.copyItem(atPath: "/usr/bin/true", toPath: copy)
        let replaced = identify(child, accepted: 3, cache: cache)
        XCTAssertTrue(replaced.askedForPidfd, "the kernel's name for the file changed (deleted)")
        XCTAssertTrue(replaced.caller.identity.exeDeleted, "the path no longer names what runs")
        XCTAssertEqual(replaced.caller.identity.exe, copy)
        XCTAssertTrue(identify(child, accepted: 4, cache: cache).caller.identity.exeDeleted, "and stays so")
    }

    /// Defect 5: a pinned process in a mount namespace of its own bind-mounts another binary over its own path there
    /// and execs that path. The kernel names the new executable exactly as the old one (the same path in its
    /// namespace), but it is another file: the pin must not vouch for it. Read in full, the path (in the agent's
    /// namespace, the old file) no longer names what runs.
    func testAPinnedProcessThatExecsAnotherFileMountedOverItsPathIsReadAfresh() throws {
        try skipWithoutPidfs()
        try XCTSkipUnless(getuid() == 0, "bind mounts in a private mount namespace need root here")
        let cache = CallerCache()
        let shell = directory.appendingPathComponent("x").path
        let other = directory.appendingPathComponent("y").path
        try FileManager.default.copyItem(atPath: "/usr/bin/dash", toPath: shell)
        try FileManager.default.copyItem(atPath: "/usr/bin/sleep", toPath: other)
        let marker = directory.appendingPathComponent("go").path
        let child = try spawn("/usr/bin/unshare", ["-m", "--propagation", "private", shell, "-c",
                                                   "while [ ! -e '\(marker)' ]; do :; done; mount --bind '\(other)' '\(shell)' && exec '\(shell)' 60"])
        waitForExecutable(child.processIdentifier, shell)
        let first = identify(child, accepted: 1, cache: cache)
        XCTAssertFalse(first.caller.identity.exeDeleted)
        XCTAssertFalse(identify(child, accepted: 2, cache: cache).askedForPidfd, "pinned")
        let mounted = try XCTUnwrap(FileID(path: other))
        _ = FileManager.default.createFile(atPath: marker, contents: nil)
        for _ in 0..<500 where FileID(path: "/proc/\(child.processIdentifier)/exe") != mounted { usleep(10_000) }
        XCTAssertEqual(FileID(path: "/proc/\(child.processIdentifier)/exe"), mounted, "the child never ran the mounted file")
        XCTAssertEqual(Caller.executable(of: child.processIdentifier), shell, "the premise: the same name")
        let after = identify(child, accepted: 3, cache: cache)
        XCTAssertTrue(after.askedForPidfd, "the pin vouched for another file under the same name")
        XCTAssertTrue(after.caller.identity.exeDeleted, "the path no longer names what runs")
    }

    /// A process in a pid namespace made in a user namespace of its own (`unshare -Urpf`): a process there may attach
    /// credentials naming another of that namespace to what it writes, and the kernel takes them, so the agent cannot
    /// tell who wrote a request. Marked, and its path names it for no policy; the same binary in the agent's pid
    /// namespace is named by it.
    func testAProcessInAPidNamespaceOfItsOwnIsNotNamedByItsPath() throws {
        let sleep = try XCTUnwrap(ClientRule.parse("/usr/bin/sleep").get())
        let plain = try spawn("/usr/bin/sleep", ["60"])
        waitForExecutable(plain.processIdentifier, "/usr/bin/sleep")
        let mine = Caller.identify(peer: peer(plain), via: "socket").identity
        XCTAssertFalse(mine.ownPIDNamespace)
        XCTAssertTrue(sleep.matches(mine))

        let unshare = try spawn("/usr/bin/unshare", ["-Urpf", "--kill-child", "/usr/bin/sleep", "60"])
        let children = "/proc/\(unshare.processIdentifier)/task/\(unshare.processIdentifier)/children"
        var inside: Int32?
        for _ in 0..<500 {
            let text = (try? String(contentsOfFile: children, encoding: .utf8)) ?? ""
            if let pid = text.split(separator: " ").first.flatMap({ Int32($0) }),
               Caller.executable(of: pid) == "/usr/bin/sleep" {
                inside = pid
                break
            }
            usleep(10_000)
        }
        let pid = try XCTUnwrap(inside, "unshare never ran sleep in its namespaces")
        let theirs = Caller.identify(peer: PeerCredentials(pid: pid, uid: getuid(), gid: getgid()), via: "socket").identity
        XCTAssertEqual(theirs.exe, "/usr/bin/sleep", "the path is read and shown")
        XCTAssertTrue(theirs.ownPIDNamespace)
        XCTAssertNil(theirs.policyExe)
        XCTAssertNil(theirs.consentKey, "nothing can be remembered for it")
        XCTAssertFalse(sleep.matches(theirs))
        XCTAssertTrue(theirs.summary.contains("(own pid namespace)"), theirs.summary)
    }

    /// The running file renamed away and another put at its path, or a directory above it renamed and another put in
    /// its place: the file is still linked (no " (deleted)"), but the kernel names it by its new path, so the pin's
    /// shortcut ends and the full read finds the path no longer names what runs.
    func testAMovedFileOrDirectoryIsNoticedOnAPinnedIdentity() throws {
        try skipWithoutPidfs()
        for moveDirectory in [false, true] {
            let cache = CallerCache()
            let folder = directory.appendingPathComponent("bin-\(moveDirectory)")
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
            let path = folder.appendingPathComponent("client").path
            try FileManager.default.copyItem(atPath: "/usr/bin/sleep", toPath: path)
            let child = try spawn(path, ["60"])
            waitForExecutable(child.processIdentifier, path)
            _ = identify(child, accepted: 1, cache: cache)
            XCTAssertFalse(identify(child, accepted: 2, cache: cache).askedForPidfd)
            if moveDirectory {
                try FileManager.default.moveItem(at: folder, to: directory.appendingPathComponent("bin-old"))
                try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
            } else {
                try FileManager.default.moveItem(atPath: path, toPath: path + ".old")
            }
            try FileManager.default.copyItem(atPath: "/usr/bin/true", toPath: path)
            let after = identify(child, accepted: 3, cache: cache)
            XCTAssertTrue(after.askedForPidfd, "moved directory: \(moveDirectory)")
            XCTAssertEqual(after.caller.identity.exe, path, "the path read when it first connected")
            XCTAssertTrue(after.caller.identity.exeDeleted, "moved directory: \(moveDirectory)")
        }
    }

    /// At most pinCapacity descriptors are held; a sweep gives back those of exited processes.
    func testPinsAreBoundedAndSweptWhenTheirProcessesExit() throws {
        try skipWithoutPidfs()
        let cache = CallerCache(pinCapacity: 2)
        let children = try (0..<3).map { _ in try spawn("/usr/bin/sleep", ["60"]) }
        for child in children { waitForExecutable(child.processIdentifier, "/usr/bin/sleep") }
        for (index, child) in children.enumerated() { _ = identify(child, accepted: UInt64(index + 1), cache: cache) }
        XCTAssertEqual(cache.count, 3)
        XCTAssertEqual(cache.pinCount, 2, "the third is cached without a descriptor")
        XCTAssertTrue(identify(children[2], accepted: 10, cache: cache).askedForPidfd)
        XCTAssertEqual(cache.sweep(), 0, "all still run")
        kill(children[0].processIdentifier, SIGKILL)
        children[0].waitUntilExit()
        XCTAssertEqual(cache.sweep(), 1)
        XCTAssertEqual(cache.pinCount, 1)
        XCTAssertTrue(identify(children[2], accepted: 11, cache: cache).askedForPidfd, "room again: pinned now")
        XCTAssertEqual(cache.pinCount, 2)
        XCTAssertFalse(identify(children[2], accepted: 12, cache: cache).askedForPidfd)
    }

    /// When the pins have run out, those of exited processes are swept to make room, without waiting for the idle
    /// hook (a client that stays connected keeps it from running).
    func testPinsOfExitedProcessesMakeRoomWhenThePinsRunOut() throws {
        try skipWithoutPidfs()
        let cache = CallerCache(pinCapacity: 1)
        let first = try spawn("/usr/bin/sleep", ["60"])
        let second = try spawn("/usr/bin/sleep", ["60"])
        for child in [first, second] { waitForExecutable(child.processIdentifier, "/usr/bin/sleep") }
        _ = identify(first, accepted: 1, cache: cache)
        XCTAssertEqual(cache.pinCount, 1)
        kill(first.processIdentifier, SIGKILL)
        first.waitUntilExit()
        _ = identify(second, accepted: 2, cache: cache)
        XCTAssertEqual(cache.pinCount, 1)
        XCTAssertFalse(identify(second, accepted: 3, cache: cache).askedForPidfd, "the second process holds the pin now")
    }

    /// A held `/proc/PID` directory names its process, not the pid: after the process has gone nothing under it
    /// reads, neither the name nor the file.
    func testAHeldProcessDirectoryOutlivesNoProcess() throws {
        let child = try spawn("/usr/bin/sleep", ["60"])
        waitForExecutable(child.processIdentifier, "/usr/bin/sleep")
        let held = try XCTUnwrap(ProcessDirectory.open(pid: child.processIdentifier))
        XCTAssertEqual(held.reads(Array("/usr/bin/sleep".utf8)), true)
        XCTAssertEqual(held.reads(Array("/usr/bin/slee".utf8)), false)
        XCTAssertEqual(held.reads(Array("/usr/bin/sleeq".utf8)), false)
        XCTAssertEqual(held.executable, FileID(path: "/usr/bin/sleep"))
        XCTAssertNotEqual(held.executable, FileID(path: "/usr/bin/env"))
        XCTAssertTrue(held.isRunning)
        kill(child.processIdentifier, SIGKILL)
        child.waitUntilExit()
        XCTAssertNil(held.reads(Array("/usr/bin/sleep".utf8)))
        XCTAssertNil(held.executable)
        XCTAssertFalse(held.isRunning)
        XCTAssertNil(ProcessDirectory.open(pid: 0))
    }

    func testTheCacheIsBounded() throws {
        let cache = CallerCache(capacity: 4)
        let exe = try XCTUnwrap(FileID(path: "/proc/self/exe"))
        let derived = CallerCache.Derived(exe: "/x", exeDeleted: false, unit: nil, flatpakApp: nil)
        for pid in Int32(1)...10 { cache.store(pid: pid, startTime: 1, executable: exe, derived) }
        XCTAssertLessThanOrEqual(cache.count, 4)
        XCTAssertNotNil(cache.lookup(pid: 10, startTime: 1, executable: exe), "the newest entry is kept")
    }
}
