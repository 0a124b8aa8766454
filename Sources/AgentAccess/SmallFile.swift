import Glibc
import CProcFS

/// Reads a small file that someone other than the agent may have put in place (a caller's `/.flatpak-info`, a
/// Flatpak instance's `bwrapinfo.json`) without blocking on it, whatever it is: named with `O_PATH | O_NOFOLLOW` (no
/// open handler runs; a symlink is itself, not followed), it must be a regular file of at most `limit` bytes by its
/// cached attributes (`AT_STATX_DONT_SYNC`), and only then is it opened, `O_NONBLOCK | O_NOCTTY`, and read up to that
/// size.
enum SmallFile {
    enum Found: Equatable {
        /// Nothing at the path (or a directory on the way is missing).
        case missing
        /// Something is there, but not a file read this way (a symlink, FIFO, device, directory, a larger file, or one
        /// `accept` refused), or reading it failed.
        case refused
        case text(String)
        /// The first `limit` bytes of a larger regular file (only when asked for with `prefix`).
        case prefix(String)
    }

    /// The file at `path`; `accept` judges its attributes (its mount, for a caller's root) before it is opened. With
    /// `prefix`, a larger regular file is read up to `limit` bytes instead of refused.
    static func read(_ path: String, limit: Int, prefix: Bool = false, accept: (aa_file_info) -> Bool = { _ in true }) -> Found {
        let fd = aa_open_path_nofollow(path)
        guard fd >= 0 else { return errno == ENOENT || errno == ENOTDIR ? .missing : .refused }
        defer { close(fd) }
        var file = aa_file_info()
        guard aa_file_info_at(fd, "", 1, &file) == 0, file.mode & UInt32(S_IFMT) == UInt32(S_IFREG),
              prefix || file.size <= UInt64(limit), accept(file) else { return .refused }
        return withUnsafeTemporaryAllocation(byteCount: limit, alignment: 1) { buffer -> Found in
            let count = aa_read_reopened(fd, buffer.baseAddress, UInt(buffer.count))
            guard count >= 0 else { return .refused }
            let text = String(decoding: UnsafeRawBufferPointer(rebasing: buffer[..<count]), as: UTF8.self)
            return prefix && count == buffer.count ? .prefix(text) : .text(text)
        }
    }
}
