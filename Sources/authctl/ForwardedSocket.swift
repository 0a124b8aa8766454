import AgentIPC
import Glibc

/// The remote half: where ssh puts a forward on the host, and how authctl there finds it.
enum ForwardedSocket {
    /// Forwards are made in this directory on the host, one fresh path per session (sshd creates the socket there,
    /// mode 0600 by its default `StreamLocalBindMask`): a stale socket of a dropped session never blocks the next.
    static let directory = "/tmp"
    static let prefix = "auth-agent-forward-"
    /// Set on the host when its sshd accepts it (`AcceptEnv`); otherwise authctl there looks in ``directory``.
    static let variable = "AUTH_AGENT_SOCKET"

    static func freshRemotePath() -> String {
        // The system generator (getrandom): not a secret, only never the same twice.
        let bytes = (0..<12).map { _ in UInt8.random(in: .min ... .max) }
        return "\(directory)/\(prefix)\(bytes.map { String($0, radix: 16) }.map { $0.count == 1 ? "0" + $0 : $0 }.joined()).sock"
    }

    /// The forward to use on a host: the most recently made socket in ``directory`` that is one of ours (a socket,
    /// owned by this user, mode 0600 or stricter) and accepts a connection. Nil when there is none.
    static func find() -> String? {
        guard let dir = opendir(directory) else { return nil }
        defer { closedir(dir) }
        var candidates: [(path: String, made: Int)] = []
        while let entry = readdir(dir) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            guard name.hasPrefix(prefix), name.hasSuffix(".sock") else { continue }
            let path = "\(directory)/\(name)"
            var info = stat()
            guard lstat(path, &info) == 0, info.st_mode & S_IFMT == S_IFSOCK, info.st_uid == getuid(),
                  info.st_mode & 0o077 == 0 else { continue }
            candidates.append((path, info.st_mtim.tv_sec * 1_000_000_000 + info.st_mtim.tv_nsec))
        }
        for candidate in candidates.sorted(by: { $0.made > $1.made }) where accepts(candidate.path) {
            return candidate.path
        }
        return nil
    }

    /// The program that ran authctl: its nearest ancestor that is not a shell, or nil when only shells stand
    /// between authctl and sshd (a command typed in the session, or given to ssh, such as `cd x && authctl token
    /// work`: the session itself asks). Read from /proc; nil when unreadable.
    static func askingProgram() -> String? {
        let shells: Set<String> = ["sh", "dash", "bash", "zsh", "ksh", "mksh", "fish", "busybox"]
        var pid = getppid()
        for _ in 0..<8 where pid > 1 {
            guard let exe = executable(of: pid) else { return nil }
            let name = exe.split(separator: "/").last.map(String.init) ?? exe
            if name == "sshd" || name == "sshd-session" { return nil }
            if !shells.contains(name) { return exe }
            pid = parent(of: pid) ?? 0
        }
        return nil
    }

    private static func executable(of pid: Int32) -> String? {
        var buffer = [CChar](repeating: 0, count: 4096)
        let count = readlink("/proc/\(pid)/exe", &buffer, buffer.count - 1)
        return count > 0 ? String(decoding: buffer[..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self) : nil
    }

    /// The parent pid, from `/proc/PID/stat` (after the command name's closing parenthesis).
    private static func parent(of pid: Int32) -> Int32? {
        guard let file = fopen("/proc/\(pid)/stat", "r") else { return nil }
        defer { fclose(file) }
        var buffer = [CChar](repeating: 0, count: 1024)
        guard fgets(&buffer, Int32(buffer.count), file) != nil else { return nil }
        let line = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        guard let close = line.lastIndex(of: ")") else { return nil }
        let fields = line[line.index(after: close)...].split(separator: " ")
        return fields.count > 1 ? Int32(fields[1]) : nil
    }

    /// Whether something listens at `path` (a dropped session's socket refuses).
    private static func accepts(_ path: String) -> Bool {
        (try? AgentClient(path: path, connectTimeout: .seconds(2))) != nil
    }
}
