@testable import AgentAccess
import AuthCore
import Foundation
import XCTest

/// ``Caller/identify(peer:via:pidfd:connection:)`` with real processes, for what the access gate's and the socket
/// server's tests do not reach.
final class CallerTests: ChildProcessTestCase {
    func peer(_ child: Process) -> PeerCredentials { PeerCredentials(pid: child.processIdentifier, uid: getuid(), gid: getgid()) }

    /// Waits (bounded) until `pid` runs `exe`.
    func waitForExecutable(_ pid: Int32, _ exe: String) {
        for _ in 0..<500 where Caller.executable(of: pid) != exe { usleep(10_000) }
        XCTAssertEqual(Caller.executable(of: pid), exe)
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

    /// Issue 21's defect 5, on the one route: a process in a mount namespace of its own bind-mounts another binary over
    /// its own path there and execs that path. The kernel names the new executable exactly as the old one, but it is
    /// another file; the replaced-file check (the file at the path in the agent's namespace against the running one,
    /// by device and inode) says the path no longer names what runs.
    func testAProcessThatExecsAnotherFileMountedOverItsPathIsNotNamedByIt() throws {
        try XCTSkipUnless(getuid() == 0, "bind mounts in a private mount namespace need root here")
        let shell = directory.appendingPathComponent("x").path
        let other = directory.appendingPathComponent("y").path
        try FileManager.default.copyItem(atPath: "/usr/bin/dash", toPath: shell)
        try FileManager.default.copyItem(atPath: "/usr/bin/sleep", toPath: other)
        let marker = directory.appendingPathComponent("go").path
        let child = try spawn("/usr/bin/unshare", ["-m", "--propagation", "private", shell, "-c",
                                                   "while [ ! -e '\(marker)' ]; do :; done; mount --bind '\(other)' '\(shell)' && exec '\(shell)' 60"])
        waitForExecutable(child.processIdentifier, shell)
        XCTAssertFalse(Caller.identify(peer: peer(child), via: "socket").identity.exeDeleted)
        let mounted = try XCTUnwrap(FileID(path: other))
        _ = FileManager.default.createFile(atPath: marker, contents: nil)
        // Bounded wait for the child's exec: there is nothing to block on for another process's execve.
        for _ in 0..<500 where FileID(path: "/proc/\(child.processIdentifier)/exe") != mounted { usleep(10_000) }
        XCTAssertEqual(FileID(path: "/proc/\(child.processIdentifier)/exe"), mounted, "the child never ran the mounted file")
        XCTAssertEqual(Caller.executable(of: child.processIdentifier), shell, "the premise: the same name")
        let after = Caller.identify(peer: peer(child), via: "socket")
        XCTAssertEqual(after.identity.exe, shell)
        XCTAssertTrue(after.identity.exeDeleted, "the path no longer names what runs")
        XCTAssertFalse(try XCTUnwrap(ClientRule.parse(shell).get()).matches(after.identity))
    }
}
