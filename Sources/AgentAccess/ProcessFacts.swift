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
    /// In a root of its own without a readable `/.flatpak-info` naming an app.
    var unnamedSandbox = false
    /// In a root the agent may not read.
    var rootUnreadable = false
    /// In a root of its own (readable or not): the path its executable shows is in its own mount namespace.
    var ownRoot = false
    var ownPIDNamespace = false
    /// The instance and sandbox holes its `/.flatpak-info` names, and why that instance's namespaces are not its own.
    var flatpakInstance: String? = nil
    var sandboxHoles: [String] = []
    var instanceMismatch: String? = nil

    /// Process `pid`'s facts, from `/proc/PID` (and the caller's `/.flatpak-info`, through ``CallerRoot``).
    static func read(pid: Int32) -> ProcessFacts {
        let link = Caller.executable(of: pid).map(ProcFS.executable(link:))
        let unit = Caller.readText("/proc/\(pid)/cgroup").flatMap(ProcFS.unit(cgroup:))
        // In a root of its own, identity comes from the sandbox (its /.flatpak-info) or nowhere: not from the unit,
        // and not from the paths it shows, which are its own.
        let (app, unnamedSandbox, rootUnreadable): (String?, Bool, Bool)
        var sandbox: FlatpakInfo?
        let root = CallerRoot.read(pid: pid)
        switch root {
        case .agentsRoot: (app, unnamedSandbox, rootUnreadable) = (unit.flatMap(ProcFS.flatpakApp(unit:)), false, false)
        case .ownRoot(let text):
            sandbox = text.map(FlatpakInfo.init(parsing:)).flatMap { $0.app == nil ? nil : $0 }
            (app, unnamedSandbox, rootUnreadable) = (sandbox?.app, sandbox == nil, false)
        case .unreadable: (app, unnamedSandbox, rootUnreadable) = (nil, true, true)
        }
        // Unreadable (the process is gone, or not dumpable) counts as its own: nothing then vouches for the writer.
        let ownPIDNamespace = aa_proc_pid_namespace_foreign(pid) != 0
        var facts = ProcessFacts(exe: link?.path, exeDeleted: link?.deleted ?? false, unit: unit, flatpakApp: app,
                                 unnamedSandbox: unnamedSandbox, rootUnreadable: rootUnreadable,
                                 ownPIDNamespace: ownPIDNamespace)
        facts.ownRoot = root != .agentsRoot
        if let sandbox {
            facts.flatpakInstance = sandbox.instance
            facts.sandboxHoles = sandbox.holes
            if let instance = sandbox.instance, case .mismatch(let why) = FlatpakInstance.check(instance: instance, pid: pid) {
                facts.instanceMismatch = why
            }
        }
        return facts
    }

    /// The identity, given `running`, the device and inode of the file the process runs (`/proc/PID/exe`): when the
    /// file now at the path is another one (replaced by a rename, e.g. an upgrade or an attacker's copy), the path no
    /// longer names the running code, and the executable counts as deleted. A process in a root of its own shows a
    /// path of its own mount namespace (a Flatpak app's `/app/bin/...`), which the agent's file system does not
    /// hold: only the kernel's " (deleted)" counts for it. (Looking the path up in its root could block on a file
    /// system the sandbox mounted; its path serves no rule anyway, ``ClientIdentity/policyExe``.)
    func identity(running: FileID?) -> ClientIdentity {
        var deleted = exeDeleted
        if let exe, !deleted, !ownRoot, let running, FileID(path: exe) != running { deleted = true }
        return ClientIdentity(exe: exe, exeDeleted: deleted, unit: unit, flatpakApp: flatpakApp,
                              unnamedSandbox: unnamedSandbox, rootUnreadable: rootUnreadable,
                              ownPIDNamespace: ownPIDNamespace, flatpakInstance: flatpakInstance,
                              sandboxHoles: sandboxHoles, instanceMismatch: instanceMismatch)
    }
}
