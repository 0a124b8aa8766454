import CProcFS
import Glibc
import ProcessTree

/// Reads `/.flatpak-info` in a caller's root directory (`/proc/PID/root`), a file system the caller may control:
/// in a user namespace of its own it can mount a tmpfs there and put a FIFO, a device, a symlink or a huge file
/// at that path, or mount a FUSE file system whose server never answers. Identification runs on the accept loop's
/// thread, so nothing here may block, whatever the caller's root holds:
///
/// - A caller whose root is the agent's own root directory is not in a sandbox; its `/.flatpak-info` is not read at
///   all (one cached `statx`: the common case costs no more than the failed open it replaces).
/// - Otherwise the file is read only if the root and the file are on tmpfs mounts (what Flatpak's `bwrap` makes;
///   tmpfs has no server that can stall), judged by the mount ids `statx` reports against `/proc/PID/mountinfo`,
///   which the kernel writes without asking any file system. A mount made after that read has an id not in it.
/// - The file is read by ``SmallFile``: named with `O_PATH | O_NOFOLLOW`, a regular file by its cached attributes,
///   opened `O_NONBLOCK | O_NOCTTY` and read up to ``FlatpakInfo/prefixBytes`` (a larger one is read as far as that).
///
/// A marker the agent cannot read this way is not "no marker": the caller is then confined and unidentified
/// (``ProcessFacts``). A root that is not tmpfs is not looked into at all (a FUSE or overlay root could stall the
/// look-up): its caller is judged by its pid namespace, as a container or as host code that made its own root.
enum CallerRoot {
    /// What a caller's root directory says about it.
    enum Found: Equatable {
        /// The agent's own root: not in a sandbox.
        case agentsRoot
        /// A root of its own, and what its `/.flatpak-info` is.
        case ownRoot(Marker)
        /// A root the agent may not read (the process is not dumpable, or holds privileges the agent lacks).
        case unreadable
    }

    /// A sandbox's `/.flatpak-info`, as far as the agent could read it.
    enum Marker: Equatable {
        /// None there, or a root the agent does not look into (not tmpfs).
        case none
        /// Its text, or its first ``FlatpakInfo/prefixBytes`` (`complete` false).
        case text(String, complete: Bool)
        /// Something is there that cannot be read safely: why.
        case refused(String)
    }

    /// The agent's own root directory (device and inode), read once.
    private static let ownRoot: FileID? = FileID(path: "/")

    /// Process `pid`'s root: the agent's, its own with its `/.flatpak-info` if readable, or one it may not read.
    static func read(pid: Int32) -> Found {
        var root = aa_file_info()
        guard aa_file_info_at(AT_FDCWD, "/proc/\(pid)/root", 0, &root) == 0 else { return .unreadable }
        if let ownRoot, ownRoot.device == root.device, ownRoot.inode == root.inode { return .agentsRoot }
        return .ownRoot(marker(pid: pid, root: root))
    }

    /// The `/.flatpak-info` in process `pid`'s root `root` (not the agent's).
    private static func marker(pid: Int32, root: aa_file_info) -> Marker {
        guard root.mount_id != 0, let mountinfo = ProcFile.text("/proc/\(pid)/mountinfo", limit: 1 << 20),
              let filesystems = ProcFS.filesystemTypes(mountinfo: mountinfo),
              filesystems[root.mount_id] == "tmpfs" else { return .none }
        switch SmallFile.read("/proc/\(pid)/root/.flatpak-info", limit: FlatpakInfo.prefixBytes, prefix: true, accept: { filesystems[$0.mount_id] == "tmpfs" }) {
        case .missing: return .none
        case .refused: return .refused("its /.flatpak-info is not a readable regular file on the sandbox's own tmpfs")
        case .text(let text): return .text(text, complete: true)
        case .prefix(let text): return .text(text, complete: false)
        }
    }
}
