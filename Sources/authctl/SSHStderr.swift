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
    /// Lines of ssh's that are left out: ssh's complaint that it cannot reach the session's socket here, which it
    /// makes for every connection on the host after the forward ended (the host's authctl says so itself).
    private let hidden: String

    /// `socket`: the session's socket here, which ssh forwards to.
    init(socket: String) throws(CLIFailure) {
        // ssh prints at most 100 bytes of the path.
        hidden = "connect to \(String(decoding: socket.utf8.prefix(100), as: UTF8.self)) port -2 failed"
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
        Self.writeAll(shown(chunk[..<n]))
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

    /// `bytes` without the lines that hold ``hidden`` (ssh writes each message whole).
    private func shown(_ bytes: ArraySlice<UInt8>) -> ArraySlice<UInt8> {
        guard String(decoding: bytes, as: UTF8.self).contains(hidden) else { return bytes }
        let lines = bytes.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false)
        let kept = lines.enumerated().filter { index, line in
            !String(decoding: line, as: UTF8.self).contains(hidden) || index == lines.count - 1 && line.isEmpty
        }
        return ArraySlice(kept.map { Array($0.element) }.joined(separator: [UInt8(ascii: "\n")]))
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
