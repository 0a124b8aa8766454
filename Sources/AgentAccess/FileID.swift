import Glibc
import CProcFS

/// A file's device and inode (`statx`, following links): the same pair is the same file. The attributes are the
/// ones the kernel has cached (`AT_STATX_DONT_SYNC`), so a caller's FUSE server is not asked for them.
struct FileID: Equatable, Sendable {
    let device: UInt64
    let inode: UInt64

    init?(path: String) {
        self.init { aa_file_info_at(AT_FDCWD, path, 0, &$0) }
    }

    /// The file process `pid` runs now (`/proc/PID/exe`, followed), without building the path as a Swift string.
    init?(runningOf pid: Int32) {
        self.init { aa_proc_exe_info(pid, &$0) }
    }

    /// What `read` (a C call: 0 on success) fills in.
    private init?(_ read: (inout aa_file_info) -> Int32) {
        var info = aa_file_info()
        guard read(&info) == 0 else { return nil }
        (device, inode) = (info.device, info.inode)
    }
}
