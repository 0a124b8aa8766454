import Glibc
import CProcFS
import FoundationEssentials

/// The consistency check between a caller's `/.flatpak-info` and its instance's `bwrapinfo.json`: `flatpak run` keeps
/// bubblewrap's `--info-fd` output (the namespaces bwrap made: `pid-namespace`, `mnt-namespace`, by inode) in
/// `$XDG_RUNTIME_DIR/.flatpak/ID/bwrapinfo.json`, outside the sandbox. A caller in a pid namespace of its own that
/// names instance ID must be in that instance's namespaces. This is consistency, not proof: a host process of the
/// user can write both files (docs/SECURITY.md).
///
/// A caller in the agent's own pid namespace is not compared: Flatpak runs the app's D-Bus proxy there, in a bwrap of
/// its own with the app's `/.flatpak-info`, so the instance's namespaces are never the proxy's.
enum FlatpakInstance {
    enum Check: Equatable {
        /// The caller is in the namespaces the record names.
        case consistent
        /// Nothing to compare: no record (or an empty one, as Flatpak creates it before bwrap writes it), or a caller
        /// in the agent's pid namespace.
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

    /// Whether process `pid`, whose `/.flatpak-info` names `instance` (digits only: ``FlatpakInfo``), runs in that
    /// instance's namespaces.
    static func check(instance: String, pid: Int32) -> Check {
        guard let runtimeDirectory, let theirs = namespace("/proc/\(pid)/ns/pid"), theirs != ownPIDNamespace else {
            return .unchecked
        }
        let path = "\(runtimeDirectory)/.flatpak/\(instance)/bwrapinfo.json"
        switch SmallFile.read(path, limit: maxBytes) {
        case .missing: return .unchecked
        case .refused, .prefix: return .mismatch("instance \(instance)'s bwrapinfo.json is not a regular file of at most \(maxBytes) bytes")
        case .text(let text):
            if text.allSatisfy(\.isWhitespace) { return .unchecked }
            guard let record = ProcFS.bwrapNamespaces(json: text) else {
                return .mismatch("instance \(instance)'s bwrapinfo.json is not bwrap's --info-fd record")
            }
            return compare(record, instance: instance, pid: pid, pidNamespace: theirs)
        }
    }

    static func compare(_ record: ProcFS.BwrapNamespaces, instance: String, pid: Int32, pidNamespace: UInt64) -> Check {
        if let recorded = record.pid, recorded != pidNamespace {
            return .mismatch("its pid namespace \(pidNamespace) is not instance \(instance)'s (\(recorded))")
        }
        if let recorded = record.mount {
            let theirs = namespace("/proc/\(pid)/ns/mnt")
            guard theirs == recorded else {
                return .mismatch("its mount namespace \(theirs.map(String.init) ?? "(unreadable)") is not instance \(instance)'s (\(recorded))")
            }
        }
        return record.pid == nil && record.mount == nil ? .unchecked : .consistent
    }

    /// The inode of the namespace `/proc/.../ns/NAME` stands for (the link followed), or nil.
    private static func namespace(_ path: String) -> UInt64? {
        var info = aa_file_info()
        return aa_file_info_at(AT_FDCWD, path, 0, &info) == 0 ? info.inode : nil
    }
}
