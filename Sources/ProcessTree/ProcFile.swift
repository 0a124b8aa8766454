import Glibc

/// The `/proc` files both programs read: the agent to identify a caller (and what ran it), authctl on a host to name
/// the program that ran it. One reader, so the two read processes the same way.
public enum ProcFile {
    /// A small `/proc` file's text (at most `limit` bytes; a longer file is nil, not cut short), or nil.
    public static func text(_ path: String, limit: Int = 65536) -> String? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var bytes: [UInt8] = []
        // The chunk is on the stack and not zeroed: this runs a few times per socket connection.
        let complete = withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 4096) { chunk -> Bool in
            while true {
                let n = read(fd, chunk.baseAddress, chunk.count)
                if n < 0 { return false }
                if n == 0 { return true }
                bytes.append(contentsOf: UnsafeBufferPointer(rebasing: chunk[0..<n]))
                if bytes.count > limit { return false }
                // These files are generated whole on open (single_open): a short read is the end, no need to ask
                // again. Not so /proc/PID/mountinfo (a seq_file read a page at a time): it is read until the end.
                if n < chunk.count, !path.hasSuffix("/mountinfo") { return true }
            }
        }
        guard complete else { return nil }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// The executable of process `pid`, as the kernel names it (a replaced or deleted binary ends in " (deleted)");
    /// nil when it cannot be read or that name is not valid UTF-8.
    public static func executable(of pid: Int32) -> String? {
        guard pid > 0 else { return nil }
        return withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 4096) { buffer -> String? in
            let count = readlink("/proc/\(pid)/exe", buffer.baseAddress!, buffer.count - 1)
            guard count > 0 else { return nil }
            // A path that is not UTF-8 is not decoded with replacement characters: two different paths would read
            // the same. No allowed_clients entry can name it (config.toml is UTF-8), so it is unknown.
            return String(validating: UnsafeBufferPointer(rebasing: buffer[0..<count]), as: UTF8.self)
        }
    }

    /// `/proc/PID/exe`'s link text split into the path and whether the kernel marked it deleted.
    public static func executable(link: String) -> (path: String, deleted: Bool) {
        let suffix = " (deleted)"
        return link.hasSuffix(suffix) ? (String(link.dropLast(suffix.count)), true) : (link, false)
    }
}
