import AuthCLI
import FoundationEssentials
import Glibc

/// config.toml as `authctl accounts add/remove` edits it: read, replace atomically (a new 0600 file in the same
/// directory, checked by the agent's own loader with `auth-agent --check-config`, then renamed over the old one),
/// so a failed edit leaves the file as it was.
struct ConfigFile {
    let path: String

    /// The text, or "" when the file does not exist yet.
    func read() throws(CLIFailure) -> String {
        var info = stat()
        guard stat(path, &info) == 0 else {
            if errno == ENOENT { return "" }
            throw CLIFailure(message: "cannot read \(path): \(String(cString: strerror(errno)))", exit: ExitStatus.account)
        }
        if info.st_mode & (S_IWGRP | S_IWOTH) != 0 {
            throw CLIFailure(message: "\(path) is writable by group or others", hint: "run `chmod go-w \(path)`", exit: ExitStatus.account)
        }
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else {
            throw CLIFailure(message: "cannot read \(path): \(String(cString: strerror(errno)))", exit: ExitStatus.account)
        }
        defer { close(fd) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 16 * 1024)
        while true {
            let n = chunk.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            // A failed read is not the end of the file: what was read so far, edited and written back, would lose
            // the rest of the user's configuration.
            if n < 0 {
                throw CLIFailure(message: "cannot read \(path): \(String(cString: strerror(errno)))", exit: ExitStatus.account)
            }
            if n == 0 { break }
            bytes += chunk[..<n]
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Writes `text` atomically after the agent's loader accepted it. Creates the directory (0700) if needed.
    /// Returns whether the loader could be run (false: auth-agent was not found, the text was written unchecked).
    @discardableResult
    func replace(with text: String) throws(CLIFailure) -> Bool {
        // A config.toml that is a symlink (dotfile managers) is edited where it points, and stays a symlink.
        var path = self.path
        if let resolved = realpath(path, nil) {
            path = String(cString: resolved)
            free(resolved)
        }
        let directory = String(path[..<(path.lastIndex(of: "/") ?? path.startIndex)])
        if !directory.isEmpty { try makeDirectories(directory) }
        let temporary = "\(directory.isEmpty ? "." : directory)/.config.toml.authctl-\(getpid())"
        let fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard fd >= 0 else {
            throw CLIFailure(message: "cannot write \(temporary): \(String(cString: strerror(errno)))", exit: ExitStatus.account)
        }
        let bytes = Array(text.utf8)
        var offset = 0
        while offset < bytes.count {
            let n = bytes[offset...].withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { break }
            offset += n
        }
        let synced = offset == bytes.count && fsync(fd) == 0
        close(fd)
        guard synced else {
            unlink(temporary)
            throw CLIFailure(message: "cannot write \(temporary)", exit: ExitStatus.account)
        }
        let checked: Bool
        switch AgentProgram.checkConfig(temporary) {
        case .accepted: checked = true
        case .notFound: checked = false
        case .refused(let reason):
            unlink(temporary)
            throw CLIFailure(message: "the edited configuration would not load, so \(path) was left unchanged: "
                                + reason.replacing(temporary, with: path),
                             hint: "fix the values (see README, \"Configure an account\"), or the file by hand",
                             exit: ExitStatus.account)
        }
        guard rename(temporary, path) == 0 else {
            let reason = String(cString: strerror(errno))
            unlink(temporary)
            throw CLIFailure(message: "cannot replace \(path): \(reason)", exit: ExitStatus.account)
        }
        return checked
    }

    private func makeDirectories(_ directory: String) throws(CLIFailure) {
        var prefix = directory.hasPrefix("/") ? "" : "."
        for part in directory.split(separator: "/") {
            prefix += "/\(part)"
            if mkdir(prefix, 0o700) != 0 && errno != EEXIST {
                throw CLIFailure(message: "cannot create \(prefix): \(String(cString: strerror(errno)))", exit: ExitStatus.account)
            }
        }
    }
}

/// The `auth-agent` binary that goes with this authctl: beside it (`make install` puts both in one directory), else
/// on PATH.
enum AgentProgram {
    enum Verdict { case accepted, notFound, refused(String) }

    static func locate() -> String? {
        var buffer = [CChar](repeating: 0, count: 4096)
        let n = readlink("/proc/self/exe", &buffer, buffer.count - 1)
        if n > 0 {
            let own = String(decoding: buffer[..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
            if let slash = own.lastIndex(of: "/") {
                let sibling = own[..<slash] + "/auth-agent"
                if access(String(sibling), X_OK) == 0 { return String(sibling) }
            }
        }
        for directory in (ProcessInfo.processInfo.environment["PATH"] ?? "").split(separator: ":") where directory.hasPrefix("/") {
            if access("\(directory)/auth-agent", X_OK) == 0 { return "\(directory)/auth-agent" }
        }
        return nil
    }

    /// Runs `auth-agent --check-config --config PATH`: the agent's own loader judges the file.
    static func checkConfig(_ path: String) -> Verdict {
        guard let program = locate() else { return .notFound }
        var pipeFDs: [Int32] = [0, 0]
        guard pipe(&pipeFDs) == 0 else { return .refused("cannot run \(program): pipe failed") }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_adddup2(&actions, pipeFDs[1], 1)
        posix_spawn_file_actions_adddup2(&actions, pipeFDs[1], 2)
        posix_spawn_file_actions_addclose(&actions, pipeFDs[0])
        let argv = [program, "--check-config", "--config", path]
        var cArgs = argv.map { strdup($0) } + [nil]
        defer { for pointer in cArgs { free(pointer) } }
        var pid: pid_t = 0
        let spawned = posix_spawn(&pid, program, &actions, nil, &cArgs, environ)
        close(pipeFDs[1])
        defer { close(pipeFDs[0]) }
        guard spawned == 0 else { return .refused("cannot run \(program): \(String(cString: strerror(spawned)))") }
        var output: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = chunk.withUnsafeMutableBytes { Glibc.read(pipeFDs[0], $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { break }
            if output.count < 64 * 1024 { output += chunk[..<n] }
        }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        let exited = status & 0x7f == 0
        if exited && (status >> 8) & 0xff == 0 { return .accepted }
        var text = String(decoding: output, as: UTF8.self)
        while text.last?.isNewline == true { text.removeLast() }
        if text.hasPrefix("auth-agent: ") { text.removeFirst("auth-agent: ".count) }
        return .refused(text.isEmpty ? "auth-agent --check-config failed" : text)
    }
}
