import Glibc
import CProcFS

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
/// - The file is read by ``SmallFile``: named with `O_PATH | O_NOFOLLOW`, a regular file of at most ``maxBytes`` by
///   its cached attributes, opened `O_NONBLOCK | O_NOCTTY` and read up to that size.
///
/// Anything else is "no file": a caller in a root of its own is then a sandbox that names no app (so nothing names
/// it: its paths are the sandbox's own), and so is one whose root cannot be read at all (not dumpable).
enum CallerRoot {
    static let maxBytes = 65536

    /// What a caller's root directory says about it.
    enum Found: Equatable {
        /// The agent's own root: not in a sandbox.
        case agentsRoot
        /// A root of its own, with the text of its `/.flatpak-info` when that could be read safely.
        case ownRoot(flatpakInfo: String?)
        /// A root the agent may not read (the process is not dumpable, or holds privileges the agent lacks).
        case unreadable
    }

    /// The agent's own root directory (device and inode), read once.
    private static let ownRoot: FileID? = FileID(path: "/")

    /// Process `pid`'s root: the agent's, its own with its `/.flatpak-info` if readable, or one it may not read.
    static func read(pid: Int32) -> Found {
        var root = aa_file_info()
        guard aa_file_info_at(AT_FDCWD, "/proc/\(pid)/root", 0, &root) == 0 else { return .unreadable }
        if let ownRoot, ownRoot.device == root.device, ownRoot.inode == root.inode { return .agentsRoot }
        return .ownRoot(flatpakInfo: flatpakInfo(pid: pid, root: root))
    }

    /// The text of `/.flatpak-info` in process `pid`'s root `root` (not the agent's), or nil (none, or not safely
    /// readable).
    private static func flatpakInfo(pid: Int32, root: aa_file_info) -> String? {
        guard root.mount_id != 0, let mountinfo = Caller.readText("/proc/\(pid)/mountinfo", limit: 1 << 20),
              let filesystems = ProcFS.filesystemTypes(mountinfo: mountinfo),
              filesystems[root.mount_id] == "tmpfs" else { return nil }
        let found = SmallFile.read("/proc/\(pid)/root/.flatpak-info", limit: maxBytes) { filesystems[$0.mount_id] == "tmpfs" }
        guard case .text(let text) = found else { return nil }
        return text
    }
}
