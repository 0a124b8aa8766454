import AuthCore
import CProcFS

/// What the kernel says about one process: its executable (the kernel's name, and whether it said deleted), systemd
/// unit, Flatpak app, and whether it runs in a pid namespace another user namespace owns. Read the same way for the
/// direct caller (``Caller/identify(peer:via:pidfd:connection:)``) and for the programs behind the agent's authctl
/// (``LiveProcessTable``), so both are identified with the same care. What it holds is the process's only if
/// something proves afterwards that `pid` was that process throughout; the readers do that, not this type.
struct ProcessFacts: Sendable {
    var exe: String?
    var exeDeleted: Bool
    var unit: String?
    var flatpakApp: String?
    var ownPIDNamespace = false

    /// Process `pid`'s facts, from `/proc/PID` (and the caller's `/.flatpak-info`, through ``CallerRoot``).
    static func read(pid: Int32) -> ProcessFacts {
        let link = Caller.executable(of: pid).map(ProcFS.executable(link:))
        let unit = Caller.readText("/proc/\(pid)/cgroup").flatMap(ProcFS.unit(cgroup:))
        let app = CallerRoot.flatpakInfo(pid: pid).flatMap(ProcFS.flatpakApp(info:))
            ?? unit.flatMap(ProcFS.flatpakApp(unit:))
        // Unreadable (the process is gone, or not dumpable) counts as its own: nothing then vouches for the writer.
        let ownPIDNamespace = aa_proc_pid_namespace_foreign(pid) != 0
        return ProcessFacts(exe: link?.path, exeDeleted: link?.deleted ?? false, unit: unit, flatpakApp: app,
                            ownPIDNamespace: ownPIDNamespace)
    }

    /// The identity, given `running`, the device and inode of the file the process runs (`/proc/PID/exe`): when the
    /// file now at the path is another one (replaced by a rename, e.g. an upgrade or an attacker's copy), the path no
    /// longer names the running code, and the executable counts as deleted.
    func identity(running: FileID?) -> ClientIdentity {
        var deleted = exeDeleted
        if let exe, !deleted, let running, FileID(path: exe) != running { deleted = true }
        return ClientIdentity(exe: exe, exeDeleted: deleted, unit: unit, flatpakApp: flatpakApp,
                              ownPIDNamespace: ownPIDNamespace)
    }
}
