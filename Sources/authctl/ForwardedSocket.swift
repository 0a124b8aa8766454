import AgentIPC
import Glibc
import ProcessTree

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

    /// Whether `path` names a forward's socket (by its file name, wherever it is).
    static func isForward(_ path: String) -> Bool {
        let name = path.split(separator: "/").last.map(String.init) ?? path
        return name.hasPrefix(prefix) && name.hasSuffix(".sock")
    }

    /// The forward to use on a host: the most recently made socket in ``directory`` that is one of ours (a socket,
    /// owned by this user, mode 0600 or stricter) and accepts a connection. Nil when there is none.
    ///
    /// sshd never removes a forward's socket when its session ends, so this also removes the dead ones it passes
    /// (``sweep(_:)``).
    static func find() -> String? {
        let candidates = ours()
        var found: String?
        var rest: [String] = []
        for candidate in candidates {
            if found == nil, probe(candidate) == true { found = candidate } else { rest.append(candidate) }
        }
        sweep(rest)
        return found
    }

    /// Removes those of `paths` (ours, from ``ours()``) that nothing listens on: a socket some process has bound
    /// (listed in `/proc/net/unix`, also between its bind and its listen) is left alone; one that is not is asked
    /// once, and removed only when the connection is refused (a socket file without a socket behind it).
    static func sweep(_ paths: [String]) {
        guard !paths.isEmpty else { return }
        let bound = boundPaths()
        for path in paths where !bound.contains(path) && probe(path) == false {
            unlink(path)
        }
    }

    /// Our forwards in ``directory``, newest first: sockets named `auth-agent-forward-*.sock`, owned by this user,
    /// with no group or other permission bits.
    static func ours() -> [String] {
        guard let dir = opendir(directory) else { return [] }
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
        return candidates.sorted { $0.made > $1.made }.map(\.path)
    }

    /// The paths of the Unix sockets bound in this network namespace (`/proc/net/unix`'s last column); empty when
    /// it cannot be read (then every path is asked).
    private static func boundPaths() -> Set<String> {
        guard let file = fopen("/proc/net/unix", "r") else { return [] }
        defer { fclose(file) }
        var paths: Set<String> = []
        var line = [CChar](repeating: 0, count: 4096)
        while fgets(&line, Int32(line.count), file) != nil {
            let text = String(decoding: line.prefix { $0 != 0 && $0 != 10 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            let fields = text.split(separator: " ", omittingEmptySubsequences: true)
            if fields.count >= 8, fields[7].hasPrefix("/") { paths.insert(String(fields[7])) }
        }
        return paths
    }

    /// true: something listens at `path`; false: the connection is refused (a dropped session's socket); nil:
    /// neither could be told (a timeout, another error).
    private static func probe(_ path: String) -> Bool? {
        do {
            _ = try AgentClient(path: path, connectTimeout: .seconds(2))
            return true
        } catch .agentNotRunning(_, let code) where code == ECONNREFUSED {
            return false
        } catch {
            return nil
        }
    }

    /// The program that ran authctl: its nearest ancestor that is not a shell, or nil when only shells stand
    /// between authctl and sshd (a command typed in the session, or given to ssh, such as `cd x && authctl token
    /// work`: the session itself asks). Read from /proc by the agent's own walk (``Ancestry``), through the shells
    /// people type in as well as those programs run; nil when unreadable.
    static func askingProgram() -> String? {
        let shells: Set<String> = ["sh", "dash", "bash", "zsh", "ksh", "mksh", "fish", "busybox"]
        let name = { (exe: String) in exe.split(separator: "/").last.map(String.init) ?? exe }
        guard let found = Ancestry.firstNotShell(above: getpid(), parent: { ProcStat.read(pid: $0)?.parent },
                                                 read: { ProcFile.executable(of: $0).map { ProcFile.executable(link: $0).path } },
                                                 shell: { $0.flatMap { shells.contains(name($0)) ? $0 : nil } }, maxShells: 7),
              found.pid > 1, let exe = found.program, !["sshd", "sshd-session"].contains(name(exe)) else { return nil }
        return exe
    }
}
