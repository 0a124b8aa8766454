import AgentIPC
import ArgumentParser
import AuthCLI
import CAgentProcess
import FoundationEssentials
import Glibc

/// `authctl forward HOST [ssh arguments]`: an ssh session to HOST with the agent forwarded for that session only.
/// The agent makes a socket for this one ssh process (``ForwardSessions`` in the agent); ssh forwards it to a fresh
/// path on the host (``ForwardedSocket``), where `authctl` finds it; ssh's `KnownHostsCommand` (this command again,
/// with `--host-key`) tells the agent which host key the server showed, which names the host with its key.
struct ForwardCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "forward",
        abstract: "Open an ssh session to a host with the agent forwarded for that session only.",
        discussion: """
        authctl forward HOST [SSH ARGUMENTS]   runs ssh HOST [SSH ARGUMENTS] with the agent forwarded
        authctl forward --list                 shows the forwards open now
        authctl forward --stop HOST            ends HOST's forwards now (the ssh sessions go on without them)

        On the host, authctl token ACCOUNT (git-credential, kube-credential) finds the forward by itself: the host \
        needs the authctl binary and nothing else. Requests from the host are judged as the host (allowed_clients \
        entries ssh:HOST or ssh:HOST@SHA256:..., or your consent), never as a program of this computer, and get \
        tokens only: no sign-in, approval or configuration. A sign-in an account needs happens here. While the \
        session lasts, whoever is root on the host can use the forward too; tokens handed out stay valid until they \
        expire. The exit status is ssh's. See docs/INTEGRATIONS.md, "SSH hosts".
        """)

    @OptionGroup var global: GlobalOptions
    @Flag(help: "Show the forwards open now.") var list = false
    @Option(help: ArgumentHelp("End the forwards to HOST now.", valueName: "host")) var stop: String?
    @Option(name: .customLong("host-key"), help: .hidden) var hostKeySession: String?
    @Argument(parsing: .captureForPassthrough, help: ArgumentHelp("HOST, then ssh's own arguments.", valueName: "host"))
    var arguments: [String] = []

    func validate() throws {
        let modes = [list, stop != nil, hostKeySession != nil, !arguments.isEmpty && hostKeySession == nil]
        guard modes.filter({ $0 }).count == 1 else {
            throw ValidationError("give a HOST to connect to, or one of --list and --stop HOST")
        }
    }

    func run() throws {
        if list { return try listForwards() }
        if let stop { return try stopForwards(stop) }
        if let hostKeySession { return reportHostKey(session: hostKeySession) }
        try open(host: arguments[0], sshArguments: Array(arguments.dropFirst()))
    }

    private func listForwards() throws {
        let client = try global.connect()
        let status = try CLIFailure.wrap { () throws(ClientError) in try client.call(WireRequest(op: .status), as: StatusResult.self) }
        if let confined = ConfinedView(status) {  // no forwards are shown to a host or an app: say so, not "none"
            throw CLIFailure(message: "forwards are opened and listed on \(confined.desktop), not from \(confined.itself)",
                             hint: "run `authctl forward --list` there", exit: ExitStatus.protocolError)
        }
        let forwards = status.forwards ?? []
        guard !forwards.isEmpty else { return print("no forwards are open") }
        let now = Int(Date().timeIntervalSince1970)
        for forward in forwards {
            print("\(forward.host)  host key \(forward.hostKey ?? "not reported yet")  ssh pid \(forward.sshPID.map(String.init) ?? "-")  open \(max(0, now - forward.since)) s")
        }
    }

    private func stopForwards(_ host: String) throws {
        let client = try global.connect()
        let result = try CLIFailure.wrap { () throws(ClientError) in
            try client.call(WireRequest(op: .forwardStop) { $0.host = host }, as: ForwardChangeResult.self)
        }
        let count = result.stopped?.count ?? 0
        guard count > 0 else {
            throw CLIFailure(message: "no forward to \(host) is open", hint: "see `authctl forward --list`", exit: ExitStatus.failure)
        }
        print("stopped \(count) forward\(count == 1 ? "" : "s") to \(host); tokens already handed out stay valid until they expire")
    }

    /// ssh's `KnownHostsCommand`: reports the host key ssh was shown, prints no known host, and always succeeds (ssh
    /// then checks the key against its own files as usual). ssh runs it once before it has seen a key, with `NONE`.
    private func reportHostKey(session: String) {
        guard let fingerprint = arguments.first, fingerprint.hasPrefix("SHA256:"), arguments.count == 1 else { return }
        do {
            let client = try global.connect()
            _ = try client.call(WireRequest(op: .forwardHostKey) { $0.session = session; $0.fingerprint = fingerprint },
                                as: ForwardChangeResult.self)
        } catch {
            writeStderr("authctl forward: could not tell the agent the host key: \(error)\n")
        }
    }

    /// Opens the session, starts ssh held until the agent knows it, and waits for ssh; exits with ssh's status.
    private func open(host: String, sshArguments: [String]) throws {
        let ssh = try SSHClient.find()
        let config = try SSHClient.configuration(ssh: ssh, host: host, arguments: sshArguments)
        if let own = config.knownHostsCommand {
            writeStderr("authctl forward: your ssh configuration's KnownHostsCommand (\(own)) is replaced for this session\n")
        }
        let client = try global.connect(.person)
        var opened: WireEvent?
        let id = try CLIFailure.wrap { () throws(ClientError) in
            try client.start(WireRequest(op: .forward) { $0.host = config.name }) { event in
                guard event.type == WireEvent.forwardOpen else { return false }
                opened = event
                return true
            }
        }
        guard let session = opened?.session, let socket = opened?.socket else {
            throw CLIFailure(message: "the agent did not say where the forward's socket is", exit: ExitStatus.protocolError)
        }
        let remote = ForwardedSocket.freshRemotePath()
        var argv = [ssh, "-o", "ExitOnForwardFailure=yes",
                    "-o", "KnownHostsCommand=\(SSHClient.quoted(RegisterScheme.ownPath())) forward --host-key=\(session) %f",
                    "-R", "\(remote):\(socket)",
                    "-o", "SetEnv=\((config.setEnv + ["\(ForwardedSocket.variable)=\(remote)"]).joined(separator: " "))"]
        argv += [host] + sshArguments
        let (pid, release) = try SSHClient.spawnHeld(argv)
        // The agent serves the socket to this process only; ssh starts once the agent knows it.
        do {
            let naming = try global.connect()
            _ = try CLIFailure.wrap { () throws(ClientError) in
                try naming.call(WireRequest(op: .forwardSSH) { $0.session = session; $0.pid = Int(pid) }, as: ForwardChangeResult.self)
            }
        } catch {
            close(release)
            _ = SSHClient.wait(pid)
            throw error
        }
        // Ctrl-C and Ctrl-\ are ssh's (the terminal sends them to both): authctl keeps the forward until ssh ends.
        signal(SIGINT, SIG_IGN)
        signal(SIGQUIT, SIG_IGN)
        _ = aa_process_release(release)
        let status = SSHClient.waitWhileServing(pid, connection: client) {
            do {
                let result = try client.reply(to: id, as: ForwardResult.self)
                writeStderr("authctl forward: the forward to \(result.host) was stopped; this ssh session goes on without it\n")
            } catch {
                writeStderr("authctl forward: the agent ended the forward (\(error)); this ssh session goes on without it\n")
            }
        }
        if status == 255 {
            // ssh's own failure (its message is above): say what authctl forward needs of the server.
            writeStderr("authctl forward: ssh failed (exit 255). If it said \"remote port forwarding failed\", \(host)'s sshd does not allow forwarding a socket (AllowStreamLocalForwarding); the session needs it\n")
        }
        CLIFailure.flushOutput()
        Glibc.exit(status)
    }
}

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

    /// The program that ran authctl: its nearest ancestor that is not a shell, unless that is sshd (then a command
    /// typed in the session: the shell, or nil when sshd ran authctl itself). Read from /proc; nil when unreadable.
    static func askingProgram() -> String? {
        let shells: Set<String> = ["sh", "dash", "bash", "zsh", "ksh", "fish", "busybox"]
        var pid = getppid()
        var nearest: String?
        for _ in 0..<8 where pid > 1 {
            guard let exe = executable(of: pid) else { return nearest }
            let name = exe.split(separator: "/").last.map(String.init) ?? exe
            if name == "sshd" { return nearest }
            if nearest == nil { nearest = exe }
            if !shells.contains(name) { return exe }
            pid = parent(of: pid) ?? 0
        }
        return nearest
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

/// The local ssh client: found on PATH, asked for its configuration, started held.
enum SSHClient {
    struct Configuration {
        /// The host as ssh checks its key: HostKeyAlias, else HostName with `:PORT` when not 22.
        var name: String
        var setEnv: [String]
        var knownHostsCommand: String?
    }

    static func find() throws(CLIFailure) -> String {
        let path = getenv("PATH").map { String(cString: $0) } ?? "/usr/bin:/bin"
        for directory in path.split(separator: ":") where !directory.isEmpty {
            let candidate = "\(directory)/ssh"
            if access(candidate, X_OK) == 0 { return candidate }
        }
        throw CLIFailure(message: "ssh is not installed (no ssh on PATH)", hint: "install OpenSSH's client (apt install openssh-client)",
                         exit: ExitStatus.failure)
    }

    /// `ssh -G ARGUMENTS HOST`: what ssh will do for this host, without connecting.
    static func configuration(ssh: String, host: String, arguments: [String]) throws(CLIFailure) -> Configuration {
        var buffer = [CChar](repeating: 0, count: 256 * 1024)
        var status: Int32 = 0
        let count = withCStrings([ssh, "-G", host] + arguments) { argv in
            aa_process_capture(ssh, argv, &buffer, UInt(buffer.count), 10_000, &status)
        }
        guard count >= 0, status == 0 else {
            throw CLIFailure(message: "ssh -G \(host) failed\(count < 0 ? ": \(String(cString: strerror(Int32(-count))))" : " (exit \(status))")",
                             hint: "check the host name and the ssh arguments", exit: ExitStatus.usage)
        }
        var values: [String: String] = [:]
        var setEnv: [String] = []
        let text = String(decoding: buffer[..<Int(count)].map { UInt8(bitPattern: $0) }, as: UTF8.self)
        for line in text.split(separator: "\n") {
            let parts = line.split(separator: " ", maxSplits: 1).map(String.init)
            guard parts.count == 2 else { continue }
            if parts[0] == "setenv" { setEnv.append(parts[1]) } else if values[parts[0]] == nil { values[parts[0]] = parts[1] }
        }
        guard let hostname = values["hostname"] else {
            throw CLIFailure(message: "ssh -G \(host) did not say which host it connects to", exit: ExitStatus.failure)
        }
        // ssh's own name for the host in known_hosts: the alias alone, else the host name with a port not 22.
        let port = values["port"] ?? "22"
        let name = values["hostkeyalias"] ?? (port == "22" ? hostname : "\(hostname):\(port)")
        return Configuration(name: name, setEnv: setEnv,
                             knownHostsCommand: values["knownhostscommand"].flatMap { $0 == "none" ? nil : $0 })
    }

    /// Quoted for ssh's own splitting of a command line (double quotes, backslash escapes).
    static func quoted(_ text: String) -> String {
        guard text.contains(where: { " \t\"'\\".contains($0) }) else { return text }
        return "\"" + text.replacing("\\", with: "\\\\").replacing("\"", with: "\\\"") + "\""
    }

    /// Starts `argv` held (it runs once released); its pid and the release descriptor.
    static func spawnHeld(_ argv: [String]) throws(CLIFailure) -> (pid: Int32, release: Int32) {
        var release: Int32 = -1
        let pid = withCStrings(argv) { aa_process_spawn_held(argv[0], $0, &release) }
        guard pid > 0 else {
            throw CLIFailure(message: "cannot start \(argv[0]): \(String(cString: strerror(-pid)))", exit: ExitStatus.failure)
        }
        return (pid, release)
    }

    /// Waits for `pid`; when the agent's connection says something first (the forward ended), `ended` runs once
    /// and the wait goes on for ssh alone. ssh's exit status (128 + a signal that ended it).
    static func waitWhileServing(_ pid: Int32, connection: AgentClient, ended: () -> Void) -> Int32 {
        let pidfd = aa_process_pidfd_open(pid)
        var watchingAgent = pidfd >= 0
        while watchingAgent {
            var entries = [pollfd(fd: pidfd, events: Int16(POLLIN), revents: 0),
                           pollfd(fd: connection.descriptor, events: Int16(POLLIN), revents: 0)]
            let n = poll(&entries, 2, -1)
            if n < 0 { if errno == EINTR { continue } else { break } }
            if entries[0].revents != 0 { break }
            if entries[1].revents != 0 {
                ended()
                watchingAgent = false
            }
        }
        if pidfd >= 0 { close(pidfd) }
        return wait(pid)
    }

    static func wait(_ pid: Int32) -> Int32 {
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 {
            if errno != EINTR { return ExitStatus.failure }
        }
        let signal = status & 0x7f
        return signal == 0 ? (status >> 8) & 0xff : 128 + signal
    }

    /// `body` with `strings` as a NULL-terminated C argv.
    static func withCStrings<R>(_ strings: [String], _ body: (UnsafePointer<UnsafeMutablePointer<CChar>?>) -> R) -> R {
        var pointers: [UnsafeMutablePointer<CChar>?] = strings.map { strdup($0) } + [nil]
        defer { pointers.forEach { free($0) } }
        return pointers.withUnsafeBufferPointer { body($0.baseAddress!) }
    }
}
