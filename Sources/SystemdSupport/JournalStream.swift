import Glibc

/// Whether stderr goes to the journal, so logs can drop their own timestamps and use syslog priority prefixes.
public enum JournalStream {
    /// True when `JOURNAL_STREAM` (`<device>:<inode>`, set by systemd for `StandardError=journal`) names the file
    /// that stderr is now. Comparing with `fstat` rules out a variable inherited by a process whose stderr was
    /// redirected elsewhere since.
    public static func isStderrJournal() -> Bool {
        guard let raw = getenv("JOURNAL_STREAM") else { return false }
        return matches(String(cString: raw), fd: STDERR_FILENO)
    }

    static func matches(_ value: String, fd: Int32) -> Bool {
        let parts = value.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 2, let device = UInt64(parts[0]), let inode = UInt64(parts[1]) else { return false }
        var info = stat()
        guard fstat(fd, &info) == 0 else { return false }
        return UInt64(info.st_dev) == device && UInt64(info.st_ino) == inode
    }
}
