import Glibc

/// ssh's stderr as `authctl forward` runs it: a pipe whose bytes are passed on to authctl's own stderr as they come,
/// unchanged, with the last few kept, so that authctl's advice after ssh failed follows what ssh said (a refused
/// socket forward) and not every failure (a changed host key, a refused connection).
final class SSHStderr {
    /// The read end; -1 once it reached its end.
    private(set) var descriptor: Int32
    private var writeEnd: Int32
    private var tail: [UInt8] = []
    private static let kept = 4096
    init() throws(CLIFailure) {
        var ends: [Int32] = [-1, -1]
        // Close-on-exec both (pipe2 is not in Glibc's Swift module): ssh gets the write end only as descriptor 2.
        guard pipe(&ends) == 0, fcntl(ends[0], F_SETFD, FD_CLOEXEC) == 0, fcntl(ends[1], F_SETFD, FD_CLOEXEC) == 0 else {
            throw CLIFailure(message: "cannot make a pipe for ssh's stderr: \(String(cString: strerror(errno)))", exit: ExitStatus.failure)
        }
        descriptor = ends[0]
        writeEnd = ends[1]
    }

    deinit {
        if descriptor >= 0 { close(descriptor) }
        if writeEnd >= 0 { close(writeEnd) }
    }

    /// Runs `start` (which starts ssh) with the pipe as descriptor 2, which a started process inherits; authctl's own
    /// stderr is back in place when it returns. The write end is then ssh's alone, so the pipe ends when ssh's does.
    func asStderr<R>(_ start: () throws(CLIFailure) -> R) throws(CLIFailure) -> R {
        let saved = fcntl(2, F_DUPFD_CLOEXEC, 3)
        guard saved >= 0, dup2(writeEnd, 2) >= 0 else {
            if saved >= 0 { close(saved) }
            throw CLIFailure(message: "cannot give ssh its stderr: \(String(cString: strerror(errno)))", exit: ExitStatus.failure)
        }
        defer {
            dup2(saved, 2)
            close(saved)
            close(writeEnd)
            writeEnd = -1
        }
        return try start()
    }

    /// Passes on what can be read now (call when ``descriptor`` is readable); at the end, closes it.
    func pump() {
        guard descriptor >= 0 else { return }
        var chunk = [UInt8](repeating: 0, count: 16 * 1024)
        let n = read(descriptor, &chunk, chunk.count)
        if n < 0 && errno == EINTR { return }
        guard n > 0 else {
            close(descriptor)
            descriptor = -1
            return
        }
        Self.writeAll(chunk[..<n])
        tail.append(contentsOf: chunk[..<n])
        if tail.count > Self.kept { tail.removeFirst(tail.count - Self.kept) }
    }

    /// Passes on whatever is left in the pipe once ssh has exited, without waiting for processes ssh left holding it.
    func drain() {
        while descriptor >= 0 {
            var entry = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
            guard poll(&entry, 1, 0) > 0 else { return }
            pump()
        }
    }

    /// Whether ssh's last words on stderr included `text`.
    func said(_ text: String) -> Bool {
        String(decoding: tail, as: UTF8.self).contains(text)
    }

    /// The bytes as they are: ssh's messages and the remote command's stderr (ssh may have made the terminal
    /// non-blocking: then wait until it takes more).
    private static func writeAll(_ bytes: ArraySlice<UInt8>) {
        var offset = bytes.startIndex
        while offset < bytes.endIndex {
            let n = bytes[offset...].withUnsafeBytes { write(2, $0.baseAddress, $0.count) }
            if n > 0 { offset += n; continue }
            if n < 0 && errno == EINTR { continue }
            if n < 0 && errno == EAGAIN {
                var entry = pollfd(fd: 2, events: Int16(POLLOUT), revents: 0)
                _ = poll(&entry, 1, -1)
                continue
            }
            return
        }
    }
}
