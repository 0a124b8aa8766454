@testable import AgentAccess
import AuthCore
import Foundation
import Logging
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

    /// Run by `unshare -Urm` (own user and mount namespace, the agent's pid namespace): a tmpfs at argv[1], with a
    /// `/.flatpak-info` naming an app when argv[2] is "named", as the new root; then sleeps.
    static let ownRoot = """
    import ctypes, os, sys, time
    root, kind = sys.argv[1], sys.argv[2]
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.mount(b"tmpfs", root.encode(), b"tmpfs", 0, b"mode=0755") != 0:
        raise OSError(ctypes.get_errno(), "mount tmpfs")
    if kind == "named":
        with open(os.path.join(root, ".flatpak-info"), "w") as f:
            f.write("[Application]\\nname=org.example.Named\\n")
    os.chroot(root)
    time.sleep(60)
    """

    /// Issue 46: a process in a root of its own (a sandbox, not the agent's `/`) that has no `/.flatpak-info` shows
    /// the host's path (its own binary is the host's file), yet that path is the sandbox's to choose: it is named by
    /// nothing, refused by an account that lists the path and by one without a policy. With a `/.flatpak-info` it is
    /// the app it names, asked about by an account without a policy.
    func testAProcessInARootOfItsOwnIsNamedOnlyByItsFlatpakInfo() throws {
        let host = try spawn("/usr/bin/python3", ["-c", "import time; time.sleep(60)"])
        let python = try XCTUnwrap(Caller.executable(of: host.processIdentifier))
        func inRootOfItsOwn(_ kind: String) throws -> Caller {
            let root = directory.appendingPathComponent("root-\(kind)")
            try FileManager.default.createDirectory(at: root, withIntermediateDirectories: false)
            let child = try spawn("/usr/bin/unshare", ["-Urm", python, "-c", CallerTests.ownRoot, root.path, kind])
            let own = try XCTUnwrap(FileID(path: "/"))
            // Bounded wait for the chroot: nothing to block on for another process's root.
            for _ in 0..<500 where FileID(path: "/proc/\(child.processIdentifier)/root") == own { usleep(10_000) }
            XCTAssertNotEqual(FileID(path: "/proc/\(child.processIdentifier)/root"), own, "the child never changed its root")
            return Caller.identify(peer: peer(child), via: "socket")
        }
        let listed = AccessPolicy(allowedClients: [.path(python)])
        func gate(_ policy: AccessPolicy) -> AccessGate {
            AccessGate(policies: ["work": policy], logger: Logger(label: "test"))
        }
        let plain = Caller.identify(peer: peer(host), via: "socket")
        XCTAssertFalse(plain.identity.isSandboxed)
        XCTAssertEqual(gate(listed).verdict(plain, account: "work"), .grant(.listed))

        let unnamed = try inRootOfItsOwn("unnamed")
        XCTAssertEqual(unnamed.identity.exe, python, "the premise: the path it shows is a host path a rule lists")
        XCTAssertFalse(unnamed.identity.ownPIDNamespace, "the premise: only the root tells it from the host")
        XCTAssertTrue(unnamed.identity.unnamedSandbox)
        XCTAssertNil(unnamed.identity.policyExe)
        XCTAssertNil(unnamed.identity.consentKey)
        XCTAssertEqual(gate(listed).verdict(unnamed, account: "work"), .deny(.unidentified))
        XCTAssertFalse(unnamed.identity.rootUnreadable)
        XCTAssertEqual(gate(.open).verdict(unnamed, account: "work"), .grant(.open),
                       "a root the agent can read is a host program's doing: served where any process of yours is")
        XCTAssertEqual(unnamed.wire.unnamedSandbox, true)

        let named = try inRootOfItsOwn("named")
        XCTAssertEqual(named.identity.flatpakApp, "org.example.Named")
        XCTAssertFalse(named.identity.unnamedSandbox)
        XCTAssertEqual(named.identity.consentKey, "flatpak:org.example.Named")
        XCTAssertEqual(gate(listed).verdict(named, account: "work"), .deny(.notListed))
        XCTAssertEqual(gate(.open).verdict(named, account: "work"), .ask)
        XCTAssertEqual(gate(AccessPolicy(allowedClients: [.flatpak("org.example.Named")])).verdict(named, account: "work"),
                       .grant(.listed))
    }
}
