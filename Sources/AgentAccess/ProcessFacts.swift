import AuthCore
import CProcFS
import Glibc
import ProcessTree

/// What the kernel says about one process: its executable (the kernel's name, and whether it said deleted), systemd
/// unit, and what kind of caller its root directory, sandbox marker and pid namespace make it
/// (``ClientIdentity/Kind``). Read the same way for the direct caller (``Caller/identify(peer:via:pidfd:connection:)``)
/// and for the programs behind the agent's authctl (``LiveProcessTable``), so both are identified with the same care.
/// What it holds is the process's only if something proves afterwards that `pid` was that process throughout; the
/// readers do that, not this type.
struct ProcessFacts: Sendable {
    var exe: String?
    var exeDeleted: Bool
    var unit: String?
    var kind: ClientIdentity.Kind

    /// The user's home directory, against which a sandbox's filesystem permissions are judged.
    static let home: String? = getenv("HOME").map { String(cString: $0) }.flatMap { $0.hasPrefix("/") ? $0 : nil }

    /// Process `pid`'s facts, from `/proc/PID` (and the caller's `/.flatpak-info`, through ``CallerRoot``).
    static func read(pid: Int32) -> ProcessFacts {
        let link = ProcFile.executable(of: pid).map(ProcFile.executable(link:))
        let unit = ProcFile.text("/proc/\(pid)/cgroup").flatMap(ProcFS.unit(cgroup:))
        // Unreadable (the process is gone, or not dumpable) counts as its own: nothing then vouches for the writer.
        let ownPIDNamespace = aa_proc_pid_namespace_foreign(pid) != 0
        return ProcessFacts(exe: link?.path, exeDeleted: link?.deleted ?? false, unit: unit,
                            kind: kind(pid: pid, root: CallerRoot.read(pid: pid), unit: unit, ownPIDNamespace: ownPIDNamespace))
    }

    /// The kind of caller process `pid` is. Every way of failing to read or believe a sandbox's marker is
    /// ``ClientIdentity/Kind/unidentified(why:claimedApp:)``, never a program of the desktop.
    static func kind(pid: Int32, root: CallerRoot.Found, unit: String?, ownPIDNamespace: Bool) -> ClientIdentity.Kind {
        switch root {
        case .unreadable:
            return .unidentified(why: "its root directory cannot be read (a process that is not dumpable, or holds privileges the agent lacks)")
        case .agentsRoot:
            // `flatpak run`'s own processes outside the sandbox run in the app's scope.
            if let app = unit.flatMap(ProcFS.flatpakApp(unit:)) { return .flatpak(.init(id: app)) }
            return ownPIDNamespace ? .container : .desktop
        case .ownRoot(.none):
            return ownPIDNamespace ? .container : .hostContainer
        case .ownRoot(.refused(let why)):
            return .unidentified(why: why)
        case .ownRoot(.text(let text, let complete)):
            return FlatpakInfo.kind(marker: text, complete: complete, home: home) { instance in
                if case .mismatch(let why) = FlatpakInstance.check(instance: instance, pid: pid) { return why }
                return nil
            }
        }
    }

    /// The identity, given `running`, the device and inode of the file the process runs (`/proc/PID/exe`): when the
    /// file now at the path is another one (replaced by a rename, e.g. an upgrade or an attacker's copy), the path no
    /// longer names the running code, and the executable counts as deleted. Only a program of the desktop is looked
    /// up: any other shows a path of its own mount namespace (or is named by something else), and looking the path
    /// up in its root could block on a file system the sandbox mounted.
    func identity(running: FileID?) -> ClientIdentity {
        var deleted = exeDeleted
        if case .desktop = kind, let exe, !deleted, let running, FileID(path: exe) != running { deleted = true }
        return ClientIdentity(kind, exe: exe, exeDeleted: deleted, unit: unit)
    }
}
