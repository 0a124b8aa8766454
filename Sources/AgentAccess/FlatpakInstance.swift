import Glibc
import CProcFS
import FoundationEssentials

/// The consistency check between a caller's `/.flatpak-info` and its instance's `bwrapinfo.json`: `flatpak run` keeps
/// bubblewrap's `--info-fd` output (the namespaces bwrap made: `pid-namespace`, `mnt-namespace`, by inode) in
/// `$XDG_RUNTIME_DIR/.flatpak/ID/bwrapinfo.json`, outside the sandbox, for every sandbox it starts. A caller in a pid
/// namespace of its own must name an instance whose record names both namespaces, and be in them: anything less (no
/// instance, no record, an empty one, one naming neither) is what a container that wrote a `/.flatpak-info` of its
/// own would show, so it is not believed. This is consistency, not proof: a host process of the user can write both
/// files (docs/SECURITY.md).
///
/// A caller in the agent's own pid namespace is not compared: Flatpak runs the app's D-Bus proxy there, in a bwrap of
/// its own with the app's `/.flatpak-info`, so the instance's namespaces are never the proxy's.
enum FlatpakInstance {
    enum Check: Equatable {
        /// The caller is in the namespaces the record names.
        case consistent
        /// Nothing to compare: a caller in the agent's pid namespace (see above).
        case unchecked
        /// The record names other namespaces, or cannot be read as one: why, for the audit.
        case mismatch(String)
    }

    /// bwrap writes well under 200 bytes.
    static let maxBytes = 4096

    /// The agent's `$XDG_RUNTIME_DIR`, where Flatpak keeps its instances (the agent runs as the user they belong to).
    private static let runtimeDirectory: String? = getenv("XDG_RUNTIME_DIR").map { String(cString: $0) }.flatMap {
        $0.hasPrefix("/") ? $0 : nil
    }

    /// The agent's own pid namespace (its inode).
    private static let ownPIDNamespace: UInt64? = namespace("/proc/self/ns/pid")

    /// Whether process `pid`, whose `/.flatpak-info` names `instance` (digits only: ``FlatpakInfo``; nil when it
    /// names none), runs in that instance's namespaces.
    static func check(instance: String?, pid: Int32) -> Check {
        guard let theirs = namespace("/proc/\(pid)/ns/pid") else { return .mismatch("its pid namespace cannot be read") }
        guard theirs != ownPIDNamespace else { return .unchecked }
        guard let instance else {
            return .mismatch("its /.flatpak-info names no instance, which every sandbox flatpak run starts has")
        }
        guard let runtimeDirectory else { return .mismatch("the agent has no runtime directory to find instance \(instance) in") }
        let path = "\(runtimeDirectory)/.flatpak/\(instance)/bwrapinfo.json"
        switch SmallFile.read(path, limit: maxBytes) {
        case .missing: return .mismatch("instance \(instance) has no bwrapinfo.json, which flatpak run keeps for every sandbox it starts")
        case .refused, .prefix: return .mismatch("instance \(instance)'s bwrapinfo.json is not a regular file of at most \(maxBytes) bytes")
        case .text(let text):
            if text.allSatisfy(\.isWhitespace) { return .mismatch("instance \(instance)'s bwrapinfo.json is empty") }
            guard let record = ProcFS.bwrapNamespaces(json: text) else {
                return .mismatch("instance \(instance)'s bwrapinfo.json is not bwrap's --info-fd record")
            }
            return compare(record, instance: instance, pid: pid, pidNamespace: theirs)
        }
    }

    /// The caller is in both namespaces the record names; a record that does not name both is not one bwrap wrote for
    /// a Flatpak sandbox (it always makes both).
    static func compare(_ record: ProcFS.BwrapNamespaces, instance: String, pid: Int32, pidNamespace: UInt64) -> Check {
        guard let recordedPID = record.pid, let recordedMount = record.mount else {
            return .mismatch("instance \(instance)'s bwrapinfo.json does not name its pid and mount namespaces")
        }
        if recordedPID != pidNamespace {
            return .mismatch("its pid namespace \(pidNamespace) is not instance \(instance)'s (\(recordedPID))")
        }
        let theirs = namespace("/proc/\(pid)/ns/mnt")
        guard theirs == recordedMount else {
            return .mismatch("its mount namespace \(theirs.map(String.init) ?? "(unreadable)") is not instance \(instance)'s (\(recordedMount))")
        }
        return .consistent
    }

    /// The inode of the namespace `/proc/.../ns/NAME` stands for (the link followed), or nil.
    private static func namespace(_ path: String) -> UInt64? {
        var info = aa_file_info()
        return aa_file_info_at(AT_FDCWD, path, 0, &info) == 0 ? info.inode : nil
    }
}
