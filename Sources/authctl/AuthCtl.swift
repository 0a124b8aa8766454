import AgentIPC
import ArgumentParser
import AuthCLI
import FoundationEssentials
import Glibc

let authctlVersion = "0.1.0"

@main
struct AuthCtl: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "authctl",
        abstract: "Control auth-agent and get OAuth access tokens from it.",
        discussion: """
        Examples:
          authctl login work          sign in to the account 'work' in a browser
          authctl token work          print a fresh access token, nothing else
          authctl status              show the agent and every account
          authctl git-credential -h   set authctl up as git's credential helper
          curl -H "Authorization: Bearer $(authctl token work)" https://x.example

        Exit codes: 0 ok, 1 other failure, 2 usage, 3 agent not running, 4 sign-in required, \
        5 keyring locked or unavailable, 6 authorization server unavailable or failing, \
        7 sign-in did not complete or access denied, 8 unknown account or bad account settings, 9 protocol error, \
        10 the agent's configuration file is invalid, 11 the agent did not answer in time.
        """,
        version: authctlVersion,
        subcommands: [Status.self, Login.self, Logout.self, Token.self, Accounts.self, DoctorCommand.self,
                      GitCredentialCommand.self, KubeCredentialCommand.self, Callback.self, RegisterScheme.self,
                      Audit.self, Pending.self, Approve.self, Deny.self, Forget.self, Reload.self, ForwardCommand.self, GrantCommand.self, Lock.self, Unlock.self,
                      Version.self])

    /// ArgumentParser exits 64 on usage errors; we document 2, like most Unix tools.
    static func main() {
        FastPath.runIfPossible(CommandLine.arguments)
        do {
            var command = try parseAsRoot()
            try command.run()
            CLIFailure.flushOutput()
        } catch let error as CLIFailure {
            error.report()
        } catch {
            let code = exitCode(for: error)
            if code == .validationFailure {
                writeStderr((fullMessage(for: error) + "\n"))
                Glibc.exit(ExitStatus.usage)
            }
            exit(withError: error)
        }
    }
}

struct GlobalOptions: ParsableArguments {
    @Option(name: .long, help: "The agent's socket (default: $AUTH_AGENT_SOCKET, else $XDG_RUNTIME_DIR/auth-agent/agent.sock).")
    var socket: String?

    @Option(name: .long, help: ArgumentHelp("Seconds to wait for the agent's answer (0: no limit). Default: 30, or 120 for verbs that may wait for a server; none for sign-ins.", valueName: "seconds"))
    var timeout: Int?

    func validate() throws {
        guard (timeout ?? 0) >= 0 else { throw ValidationError("--timeout must be zero or more seconds") }
    }

    func path() throws(CLIFailure) -> String { try AgentConnection.path(socket: socket) }

    func connect(_ patience: AgentConnection.Patience = .quick) throws(CLIFailure) -> AgentClient {
        try AgentConnection.connect(socket: socket, patience: patience, timeout: timeout)
    }
}

struct Status: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "status", abstract: "Show the agent and every account.")
    @OptionGroup var global: GlobalOptions
    @Flag(help: "Print JSON (the protocol's status result).") var json = false

    func run() throws {
        let client = try global.connect()
        let status = try CLIFailure.wrap { () throws(ClientError) in try client.call(WireRequest(op: .status), as: StatusResult.self) }
        if json { return printJSON(status) }
        print(Formatter.status(status, now: Int(Date().timeIntervalSince1970), color: Terminal.wantsColor))
    }
}

struct Login: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "login",
        abstract: "Sign in to an account in your browser, or with a code on another device.",
        discussion: """
        The agent opens your browser; the URL is printed too, for when no browser opens. Ctrl-C cancels the sign-in.

        With --device (and by default in an SSH session or without a graphical display, when the server offers it, or \
        when the agent cannot start a browser) the device authorization grant is used: open the printed page on any \
        device (a phone will do), enter the printed code and approve; authctl waits and shows how long the code lasts.

        With --no-browser no browser is started: open the printed URL in a browser on any machine, sign in, then copy \
        the address the browser was sent to at the end (http://127.0.0.1:PORT/oauth2/callback/ACCOUNT?code=...; the \
        page may fail to load there) and paste it as one line. It is checked exactly like a redirect that reaches the \
        agent's loopback listener; a wrong URL is refused and you can paste again.
        """)
    @OptionGroup var global: GlobalOptions
    @Argument(help: "The account name from config.toml.") var account: String
    @Flag(help: "Print the result as JSON (progress still goes to stderr).") var json = false
    @Flag(name: .customLong("no-browser"), help: "Do not start a browser: print the URL and read the final redirect URL from stdin.")
    var noBrowser = false
    @Flag(help: "Sign in with a code on another device (RFC 8628 device authorization grant).")
    var device = false

    func validate() throws {
        guard !(device && noBrowser) else { throw ValidationError("--device and --no-browser do not go together") }
    }

    func run() throws {
        let client = try global.connect(.person)
        let socketPath = try global.path()
        let account = self.account
        let noBrowser = self.noBrowser
        let choice = SignInChoice.choose(device: device, noBrowser: noBrowser, environment: ProcessInfo.processInfo.environment)
        let request = WireRequest(op: .login) {
            $0.account = account; $0.browser = noBrowser ? false : nil; $0.method = choice.wireMethod?.rawValue
        }
        var reader: PasteReader?
        var countdown: Countdown?
        let result: LoginResult
        do {
            defer { countdown?.stop() }  // before anything else is printed
            result = try CLIFailure.wrap { () throws(ClientError) in
                try client.call(request, as: LoginResult.self) { event in
                    if event.type == WireEvent.deviceCode {
                        if countdown == nil { countdown = Terminal.announceDevice(event, account: account) }
                        return
                    }
                    guard noBrowser else {
                        Terminal.announce(event, account: account)
                        if countdown == nil, event.type == WireEvent.loginStarted { countdown = Countdown.start(seconds: event.timeoutSeconds ?? 300) }
                        return
                    }
                    Terminal.announcePaste(event, account: account)
                    if reader == nil, event.type == WireEvent.loginStarted {
                        reader = PasteReader(socketPath: socketPath, account: account)
                        reader?.start()
                    }
                }
            }
        }
        if json { return printJSON(result) }
        var who = [result.name, result.email, result.subject].compactMap { $0 }.first.map { " as \($0)" } ?? ""
        if let email = result.email, let name = result.name { who = " as \(name) <\(email)>" }
        let scopes = result.scopes.map { " (scopes: \($0.joined(separator: " ")))" } ?? ""
        print("Signed in to '\(account)'\(who)\(scopes).")
        if result.keptInMemory { print(Formatter.keptInMemoryNotice) }
        guard let expiresAt = result.accessTokenExpiresAt else {
            if !result.keptInMemory { print("The access token does not expire; the agent keeps it in the keyring.") }
            return
        }
        print("The access token expires \(Formatter.relative(expiresAt, now: Int(Date().timeIntervalSince1970))); the agent refreshes it as needed.")
        if !result.hasRefreshToken {
            print("Note: the server issued no refresh token; you will need to sign in again when the access token expires.")
        }
    }
}

struct Logout: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "logout",
        abstract: "Sign out: revoke the refresh token at the server, delete it from the keyring, forget access tokens.")
    @OptionGroup var global: GlobalOptions
    @Argument(help: "The account name.") var account: String
    @Flag(help: "Print JSON.") var json = false

    func run() throws {
        let client = try global.connect(.network)
        let result = try CLIFailure.wrap { () throws(ClientError) in
            try client.call(WireRequest(op: .logout) { $0.account = account }, as: LogoutResult.self)
        }
        if json { return printJSON(result) }
        guard result.hadRefreshToken else { return print("'\(account)' was not signed in; cached access tokens were dropped.") }
        switch result.revoked {
        case true?: print("Signed out of '\(account)': the refresh token was revoked at the server and deleted from the keyring.")
        case false?:
            print("Signed out of '\(account)': the refresh token was deleted from the keyring.")
            writeStderr("authctl: warning: revocation at the server failed: \(result.revocationError ?? "unknown error")\n")
        case nil: print("Signed out of '\(account)': the refresh token was deleted from the keyring (the server has no revocation endpoint).")
        }
    }
}

struct Reload: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "reload",
        abstract: "Make the agent read its configuration file again (as `systemctl --user reload auth-agent` does).",
        discussion: """
        Accounts, their access policies and git hosts take effect at once; signed-in accounts and cached tokens are \
        kept, except for an account whose issuer, client, scopes or endpoints changed (it starts again from its \
        sign-in in the keyring). An invalid file is refused with its file:line problem (exit 10) and the \
        configuration in force keeps serving. [agent] settings take effect at the agent's next start.
        """)
    @OptionGroup var global: GlobalOptions
    @Flag(help: "Print JSON (the protocol's reload result).") var json = false

    func run() throws {
        let client = try global.connect()
        let result = try CLIFailure.wrap { () throws(ClientError) in try client.call(WireRequest(op: .reload), as: ReloadResult.self) }
        if json { return printJSON(result) }
        print("Reloaded \(result.path): \(result.accounts.count) account(s)")
        for (label, names) in [("added", result.added), ("removed", result.removed), ("changed", result.changed)] where !names.isEmpty {
            print("  \(label): \(names.joined(separator: ", "))")
        }
        if !result.needsRestart.isEmpty {
            print("  takes effect after `systemctl --user restart auth-agent`: \(result.needsRestart.joined(separator: ", "))")
        }
    }
}

struct Version: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "version", abstract: "Print authctl's version and, if it runs, the agent's.")
    @OptionGroup var global: GlobalOptions
    @Flag(help: "Print JSON.") var json = false

    func run() throws {
        var agent: PingResult?
        if let client = try? AgentConnection.connect(socket: global.socket, timeout: global.timeout ?? 5) {
            agent = try? client.call(WireRequest(op: .ping), as: PingResult.self)
        }
        if json {
            struct Versions: Codable { var authctl: String; var agent: String?; var `protocol`: Int }
            return printJSON(Versions(authctl: authctlVersion, agent: agent?.agentVersion, protocol: WireProtocol.version))
        }
        print("authctl \(authctlVersion) (protocol \(WireProtocol.version))")
        print(agent.map { "auth-agent \($0.agentVersion) (protocol \($0.protocolVersion))" } ?? "auth-agent: not running")
    }
}

func printJSON<T: Encodable>(_ value: T) {
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
    if let data = try? encoder.encode(value), let text = String(data: data, encoding: .utf8) { print(text) }
}
