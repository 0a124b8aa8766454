import AuthCore
import Glibc
import ProcessTree

/// Facts about processes as the relay walk reads them: `/proc` in the agent (``LiveProcessTable``), an in-memory table
/// in the tests, which can also change between two reads the way a real process table does.
protocol ProcessTable {
    /// The parent of process `pid` (field 4 of `/proc/PID/stat`): nil when it cannot be read (the process is gone),
    /// 0 when the parent is not in the agent's pid namespace.
    func parent(of pid: Int32) -> Int32?
    /// Process `pid`'s identity, read exactly as a direct caller's (``Caller/identify``): executable, deleted or
    /// replaced, unit, Flatpak app.
    func identity(of pid: Int32) -> ClientIdentity
}

/// Who is behind the agent's `authctl`. Mail clients, git and kubectl do not connect to the socket: they run authctl
/// (`passwordeval`, a `!` credential helper, an exec plugin), so the process that connects is authctl, and an
/// allow-list that names `/usr/bin/msmtp` would never see msmtp. For an authctl caller the agent therefore judges the
/// program that ran it: authctl's parent, read by the agent from the kernel (authctl says nothing about it), through
/// at most ``maxShells`` shells (`sh -c` of `passwordeval` and git's `!` helpers).
///
/// Only the authctl installed beside the agent relays (``relayPath``): the same directory as the agent's own
/// executable, so the same package and owner, compared as a file (device and inode), not by name. Treating a caller
/// as acting for its parent is right only for a program that does just what its parent asked and hands the token
/// to it alone (authctl prints it on its stdout). A copy elsewhere may be modified, and a program merely named
/// authctl may be anything: say `~/bin/authctl` dropped ahead of the real one in `PATH`, which msmtp would then run;
/// judged as msmtp, it would get msmtp's tokens. Such programs are judged as themselves.
///
/// The walk (``Ancestry``, which authctl on a host walks too) is tied to the processes without a pidfd: what was read
/// under `/proc/PARENT` was its own. Authctl itself is vouched for afterwards by the caller's own check
/// (``Caller/isStillConnectedProcess``).
enum RelayChain {
    /// The shells programs run commands with (`popen`, `system`, git's `!`), by executable path as the kernel names
    /// it (symlinks resolved: `/bin/sh` reads as `/usr/bin/dash` on Debian). Not the interactive shells people prefer:
    /// their parent is a terminal, and the person at it is better served by listing authctl.
    static let shells = ["/usr/bin/dash", "/usr/bin/bash", "/usr/bin/sh", "/bin/dash", "/bin/bash", "/bin/sh"]
    /// At most this many shells between the program and authctl; a deeper chain is not identified.
    static let maxShells = 4

    /// The path of the authctl that relays: beside the agent's own executable (as the kernel names it, without the
    /// " (deleted)" of an agent whose file was upgraded while it runs). Nil if the agent's executable cannot be read.
    static let relayPath: String? = ProcFile.executable(of: getpid()).flatMap { link -> String? in
        let path = ProcFile.executable(link: link).path
        guard let slash = path.utf8.lastIndex(of: UInt8(ascii: "/")) else { return nil }
        return String(path[..<slash]) + "/authctl"
    }

    /// Whether `caller` is the agent's authctl: its executable, read when it connected, was at ``relayPath`` and
    /// neither deleted nor replaced (so the process ran the file then at that path), and the process runs that file
    /// now (device and inode; a FUSE server is not asked: cached attributes). Anything else is judged as itself.
    static func isRelay(_ caller: Caller) -> Bool {
        let identity = caller.identity
        guard let relayPath, identity.relay == nil, ClientRule.sameBytes(identity.policyExe, relayPath),
              let relay = FileID(path: relayPath) else { return false }
        return FileID(runningOf: caller.pid) == relay
    }

    /// The identity of the program behind relay process `pid`, whose own identity is `relay`: the first ancestor
    /// that is not a shell, with `relay` and the shells passed on the way as its ``ClientIdentity/Relay``. An
    /// unknown executable (no program then matches a path, and nothing is remembered for it) when the chain cannot
    /// be read or tied: a parent gone, more than ``maxShells`` shells, a parent that changed while it was read.
    static func behind(_ pid: Int32, relay: ClientIdentity, in table: some ProcessTable) -> ClientIdentity {
        let through = ClientIdentity.Relay(exe: relay.exe ?? "", unit: relay.unit)
        guard let found = Ancestry.firstNotShell(above: pid, parent: table.parent(of:), read: table.identity(of:),
                                                 shell: { isShell($0) ? $0.exe : nil }, maxShells: maxShells) else {
            return ClientIdentity(exe: nil, relay: through)
        }
        var program = found.program
        program.relay = ClientIdentity.Relay(exe: through.exe, unit: through.unit, shells: found.shells.reversed())
        return program
    }

    /// A shell is walked through only if it is one of ``shells``, as a file that was not deleted or replaced (then the
    /// path no longer says what runs) and outside a sandbox (whose paths are its own).
    static func isShell(_ identity: ClientIdentity) -> Bool {
        guard let exe = identity.policyExe else { return false }
        return shells.contains { ClientRule.sameBytes(exe, $0) }
    }
}

/// The agent's own process table: `/proc`, read as ``Caller/identify`` reads a direct caller.
struct LiveProcessTable: ProcessTable {
    func parent(of pid: Int32) -> Int32? {
        ProcStat.read(pid: pid)?.parent
    }

    func identity(of pid: Int32) -> ClientIdentity {
        ProcessFacts.read(pid: pid).identity(running: FileID(runningOf: pid))
    }
}

extension Caller {
    /// This caller as an access policy judges it: for the agent's authctl (``RelayChain/isRelay(_:)``), the program
    /// behind it; anyone else as identified. Read per request, and only for accounts with a policy, so that serving
    /// an open account costs nothing more. The caller's own check (``isStillConnectedProcess``) must follow: it
    /// vouches for what was read under `/proc/PID` of authctl.
    func seenThroughRelay(in table: some ProcessTable = LiveProcessTable()) -> Caller {
        guard RelayChain.isRelay(self) else { return self }
        var judged = self
        judged.identity = RelayChain.behind(pid, relay: identity, in: table)
        return judged
    }
}
