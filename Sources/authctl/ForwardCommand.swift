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
        // Everything after HOST is ssh's, so ArgumentParser hands a help option before it to ssh too: before the
        // host it is authctl's (`authctl forward --help`, as the usage error below says).
        if hostKeySession == nil, let first = arguments.first, ["-h", "--help", "-help"].contains(first) {
            throw CleanExit.helpRequest(self)
        }
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
            print("\(forward.alias.map { "\($0) (\(forward.host))" } ?? forward.host)  host key \(forward.hostKey ?? "not reported yet")  ssh pid \(forward.sshPID.map(String.init) ?? "-")  open \(max(0, now - forward.since)) s")
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
            try client.start(WireRequest(op: .forward) { $0.host = config.name; $0.alias = config.alias }) { event in
                guard event.type == WireEvent.forwardOpen else { return false }
                opened = event
                return true
            }
        }
        guard let session = opened?.session, let socket = opened?.socket else {
            throw CLIFailure(message: "the agent did not say where the forward's socket is", exit: ExitStatus.protocolError)
        }
        let remote = ForwardedSocket.freshRemotePath()
        // The session's own connection (no multiplexing: a shared master is another process, which the agent does not
        // serve, and it would run no KnownHostsCommand); the host key reported as SHA256 whatever FingerprintHash the
        // user's configuration sets; the report sent to the agent this authctl talks to (--socket included).
        let agentSocket = try AgentConnection.path(socket: global.socket)
        let report = "\(SSHClient.quoted(RegisterScheme.ownPath())) forward --socket \(SSHClient.quoted(agentSocket)) --host-key=\(session)"
        var argv = [ssh, "-o", "ExitOnForwardFailure=yes", "-o", "ControlMaster=no", "-o", "ControlPath=none",
                    "-o", "FingerprintHash=sha256",
                    "-o", "KnownHostsCommand=\(SSHClient.percentEscaped(report)) %f",
                    "-R", "\(remote):\(socket)",
                    "-o", "SetEnv=\((config.setEnv + ["\(ForwardedSocket.variable)=\(remote)"]).map(SSHClient.quoted).joined(separator: " "))"]
        argv += [host] + sshArguments
        let sshStderr = try SSHStderr(socket: socket)
        let (pid, release) = try sshStderr.asStderr { () throws(CLIFailure) in try SSHClient.spawnHeld(argv) }
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
        let status = SSHClient.waitWhileServing(pid, connection: client, stderr: sshStderr) {
            do {
                let result = try client.reply(to: id, as: ForwardResult.self)
                writeStderr("authctl forward: the forward to \(result.host) was stopped; this ssh session goes on without it\n")
            } catch {
                writeStderr("authctl forward: the agent ended the forward (\(error)); this ssh session goes on without it\n")
            }
        }
        if status == 255, sshStderr.said("remote port forwarding failed") {
            // ssh's own failure (its message is above): say what authctl forward needs of the server.
            writeStderr("authctl forward: \(host)'s sshd does not allow forwarding a socket (AllowStreamLocalForwarding), which the session needs\n")
        }
        CLIFailure.flushOutput()
        Glibc.exit(status)
    }
}

/// The local ssh client: found on PATH, asked for its configuration, started held.
enum SSHClient {
    struct Configuration {
        /// The host as ssh checks its key: HostKeyAlias, else HostName with `:PORT` when not 22.
        var name: String
        /// The host as the person typed it (`ssh -G`'s `host`: a `Host` alias), when it is not ``name``.
        var alias: String?
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
        let alias = values["host"].flatMap { $0 == name ? nil : $0 }
        return Configuration(name: name, alias: alias, setEnv: setEnv,
                             knownHostsCommand: values["knownhostscommand"].flatMap { $0 == "none" ? nil : $0 })
    }

    /// `%` doubled: ssh expands `%` tokens in KnownHostsCommand, and a path may hold one.
    static func percentEscaped(_ text: String) -> String { text.replacing("%", with: "%%") }

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

    /// Waits for `pid`, passing on its stderr (``SSHStderr``); when the agent's connection says something first (the
    /// forward ended), `ended` runs once and the wait goes on for ssh alone. ssh's exit status (128 + a signal that
    /// ended it).
    static func waitWhileServing(_ pid: Int32, connection: AgentClient, stderr: SSHStderr, ended: () -> Void) -> Int32 {
        let pidfd = aa_process_pidfd_open(pid)
        var watchingAgent = pidfd >= 0
        // Without a pidfd, ssh's end shows as its stderr's end (unless a process it started still holds it).
        while pidfd >= 0 || stderr.descriptor >= 0 {
            var entries = [pollfd(fd: pidfd, events: Int16(POLLIN), revents: 0),
                           pollfd(fd: watchingAgent ? connection.descriptor : -1, events: Int16(POLLIN), revents: 0),
                           pollfd(fd: stderr.descriptor, events: Int16(POLLIN), revents: 0)]
            let n = poll(&entries, 3, -1)
            if n < 0 { if errno == EINTR { continue } else { break } }
            if entries[2].revents != 0 { stderr.pump() }
            if entries[0].revents != 0 { break }
            if entries[1].revents != 0 {
                ended()
                watchingAgent = false
            }
        }
        if pidfd >= 0 { close(pidfd) }
        stderr.drain()
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
