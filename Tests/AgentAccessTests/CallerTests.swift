@testable import AgentAccess
import AuthCore
import Foundation
import Logging
import ProcessTree
import XCTest

/// ``Caller/identify(peer:via:pidfd:connection:)`` with real processes, for what the access gate's and the socket
/// server's tests do not reach.
final class CallerTests: ChildProcessTestCase {
    func peer(_ child: Process) -> PeerCredentials { PeerCredentials(pid: child.processIdentifier, uid: getuid(), gid: getgid()) }

    /// SO_PEERCRED gives pid 0 for a process outside the agent's pid namespace (an agent started in one of its
    /// own, a caller in a sibling container), and a bus may name no pid: such a caller is confined and named by
    /// nothing, never "any program of yours". Before: a caller with no identity was taken for the desktop.
    func testACallerWithoutAPidIsUnidentifiedNotTheDesktop() {
        for via in ["socket", "dbus"] {
            let caller = Caller.identify(peer: PeerCredentials(pid: 0, uid: getuid(), gid: getgid()), via: via)
            XCTAssertTrue(caller.identity.isConfined, via)
            guard case .unidentified = caller.identity.kind else { return XCTFail("\(via): \(caller.identity.kind)") }
            XCTAssertNil(caller.identity.consentKey)
            XCTAssertNil(AccessPolicy.decide(caller.identity, account: "work").flatMap { if case .grant = $0 { $0 } else { nil } })
            XCTAssertNotEqual(AccessPolicy().decide(caller.identity, remembered: nil), .grant(.open), via)
        }
    }

    /// Waits (bounded) until `pid` runs `exe`.
    func waitForExecutable(_ pid: Int32, _ exe: String) {
        for _ in 0..<500 where ProcFile.executable(of: pid) != exe { usleep(10_000) }
        XCTAssertEqual(ProcFile.executable(of: pid), exe)
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
        XCTAssertEqual(mine.kind, .desktop)
        XCTAssertTrue(sleep.matches(mine))

        let unshare = try spawn("/usr/bin/unshare", ["-Urpf", "--kill-child", "/usr/bin/sleep", "60"])
        let children = "/proc/\(unshare.processIdentifier)/task/\(unshare.processIdentifier)/children"
        var inside: Int32?
        for _ in 0..<500 {
            let text = (try? String(contentsOfFile: children, encoding: .utf8)) ?? ""
            if let pid = text.split(separator: " ").first.flatMap({ Int32($0) }),
               ProcFile.executable(of: pid) == "/usr/bin/sleep" {
                inside = pid
                break
            }
            usleep(10_000)
        }
        let pid = try XCTUnwrap(inside, "unshare never ran sleep in its namespaces")
        let theirs = Caller.identify(peer: PeerCredentials(pid: pid, uid: getuid(), gid: getgid()), via: "socket").identity
        XCTAssertEqual(theirs.exe, "/usr/bin/sleep", "the path is read and shown")
        XCTAssertEqual(theirs.kind, .container)
        XCTAssertTrue(theirs.isConfined, "issue 53: never served by \"any program of yours\"")
        XCTAssertNil(theirs.policyExe)
        XCTAssertEqual(theirs.consentKey, theirs.unit.map { "unit:\($0)" }, "only the unit the host gave it names it")
        XCTAssertFalse(sleep.matches(theirs))
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
        XCTAssertEqual(ProcFile.executable(of: child.processIdentifier), shell, "the premise: the same name")
        let after = Caller.identify(peer: peer(child), via: "socket")
        XCTAssertEqual(after.identity.exe, shell)
        XCTAssertTrue(after.identity.exeDeleted, "the path no longer names what runs")
        XCTAssertFalse(try XCTUnwrap(ClientRule.parse(shell).get()).matches(after.identity))
    }

    /// Run by `unshare -Urm` (own user and mount namespace, the agent's pid namespace): a tmpfs at argv[1] as the new
    /// root, with a `/.flatpak-info` of the kind argv[2] names: none, `named` (an app), `oversized` (an app whose
    /// `[Environment]` makes the file 70,990 bytes, as `flatpak run --env` can), `cut` (permissions past the prefix the
    /// agent reads), `fifo`, `symlink`, `noname`; then sleeps.
    static let ownRoot = """
    import ctypes, os, sys, time
    root, kind = sys.argv[1], sys.argv[2]
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.mount(b"tmpfs", root.encode(), b"tmpfs", 0, b"mode=0755") != 0:
        raise OSError(ctypes.get_errno(), "mount tmpfs")
    info = os.path.join(root, ".flatpak-info")
    head = "[Application]\\nname=org.example.Named\\n\\n[Instance]\\ninstance-id=7\\n\\n[Context]\\nsockets=wayland;\\n"
    if kind == "named":
        open(info, "w").write(head)
    elif kind == "oversized":
        text = head + "\\n[Environment]\\n"
        text += "".join(f"X{i}={'v' * 60}\\n" for i in range(1100))
        open(info, "w").write(text[:70990].ljust(70990, "v"))
    elif kind == "cut":
        open(info, "w").write(head.replace("sockets=wayland;", "filesystems=" + "xdg-download/a;" * 6000 + "home;"))
    elif kind == "fifo":
        os.mkfifo(info)
    elif kind == "symlink":
        os.symlink("/etc/hostname", info)
    elif kind == "noname":
        open(info, "w").write("[Application]\\nruntime=x\\n")
    os.chroot(root)
    time.sleep(60)
    """

    /// Issue 46: a process in a root of its own (a sandbox, not the agent's `/`) that has no `/.flatpak-info` shows
    /// the host's path (its own binary is the host's file), yet that path is the sandbox's to choose: it is named by
    /// nothing but its unit, refused by an account that lists the path. In the agent's pid namespace it is host code
    /// (toolbox): served by an account without a policy. With a `/.flatpak-info` it is the app it names, asked about
    /// by an account without a policy. Issue 53: a marker the agent cannot read or parse makes the caller confined and
    /// unidentified, never a program of the desktop; a large one is read from its first 64 KiB.
    func testAProcessInARootOfItsOwnIsNamedOnlyByItsFlatpakInfo() throws {
        let host = try spawn("/usr/bin/python3", ["-c", "import time; time.sleep(60)"])
        let python = try XCTUnwrap(ProcFile.executable(of: host.processIdentifier))
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
        XCTAssertEqual(plain.identity.kind, .desktop)
        XCTAssertEqual(gate(listed).verdict(plain, account: "work"), .grant(.listed))

        let unnamed = try inRootOfItsOwn("unnamed")
        XCTAssertEqual(unnamed.identity.exe, python, "the premise: the path it shows is a host path a rule lists")
        XCTAssertEqual(unnamed.identity.kind, .hostContainer, "the agent's pid namespace, a root of its own, no marker")
        XCTAssertNil(unnamed.identity.policyExe)
        XCTAssertNil(unnamed.identity.consentKey)
        XCTAssertEqual(gate(listed).verdict(unnamed, account: "work"), .deny(.unidentified))
        XCTAssertEqual(gate(.open).verdict(unnamed, account: "work"), .grant(.open),
                       "a root of its own in the agent's pid namespace is host code: served where any process of yours is")
        XCTAssertEqual(unnamed.wire.kind, "host_container")

        let named = try inRootOfItsOwn("named")
        XCTAssertEqual(named.identity.kind, .flatpak(.init(id: "org.example.Named", instance: "7")))
        XCTAssertEqual(named.identity.consentKey, "flatpak:org.example.Named")
        XCTAssertEqual(gate(listed).verdict(named, account: "work"), .deny(.notListed))
        XCTAssertEqual(gate(.open).verdict(named, account: "work"), .ask)
        XCTAssertEqual(gate(AccessPolicy(allowedClients: [.flatpak("org.example.Named")])).verdict(named, account: "work"),
                       .grant(.listed))

        // Hole 1: a marker larger than the agent reads is read from its prefix: still that app, still confined.
        let oversized = try inRootOfItsOwn("oversized")
        XCTAssertEqual(oversized.identity.kind, .flatpak(.init(id: "org.example.Named", instance: "7")))
        XCTAssertEqual(gate(.open).verdict(oversized, account: "work"), .ask)
        // Permissions cut off by the prefix: the app may have any hole, so it is shown as not contained.
        let cut = try inRootOfItsOwn("cut")
        XCTAssertEqual(cut.identity.kind, .flatpak(.init(id: "org.example.Named", instance: "7", holes: [FlatpakInfo.unreadPermissions])))
        for kind in ["fifo", "symlink", "noname"] {
            let unreadable = try inRootOfItsOwn(kind)
            guard case .unidentified = unreadable.identity.kind else { return XCTFail("\(kind): \(unreadable.identity.kind)") }
            XCTAssertTrue(unreadable.identity.isConfined, kind)
            XCTAssertEqual(gate(.open).verdict(unreadable, account: "work"), .deny(.unidentified), kind)
            XCTAssertEqual(gate(listed).verdict(unreadable, account: "work"), .deny(.unidentified), kind)
        }
    }
}
