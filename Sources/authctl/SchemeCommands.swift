import AgentIPC
import ArgumentParser
import AuthCLI
import FoundationEssentials
import Glibc

/// `authctl callback URI`: what the desktop runs for a private-use redirect scheme (RFC 8252 §7.1). The URI goes to
/// the agent with `login_callback` and is judged there exactly like a loopback response; this command only reports
/// whether it was handed over. The person sees the sign-in's result where they ran `authctl login`.
struct Callback: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "callback",
        abstract: "Hand a sign-in response (a private-use scheme redirect URI) to the agent.",
        discussion: """
        Run by the desktop through the .desktop file that `authctl register-scheme ACCOUNT` writes, when the provider \
        sends your browser to the account's redirect_uri (e.g. com.example.app:/oauth2/callback/work?code=...). \
        The agent checks the URI like any sign-in response (scheme and path, state, iss, error).
        """)
    @OptionGroup var global: GlobalOptions
    @Argument(help: "The redirect URI the browser was sent to.") var uri: String

    func run() throws {
        let client = try global.connect()
        let uri = self.uri
        let result = try CLIFailure.wrap { () throws(ClientError) in
            try client.call(WireRequest(op: .loginCallback) { $0.url = uri }, as: LoginCallbackResult.self)
        }
        print("Handed the sign-in response for '\(result.account)' to auth-agent.")
    }
}

/// `authctl register-scheme ACCOUNT` (or `--all`): makes the desktop run `authctl callback %u` for the account's
/// private-use scheme: writes `$XDG_DATA_HOME/applications/auth-agent-<scheme>.desktop` and runs `xdg-mime default`
/// for it. `make install` runs `register-scheme --all` once the agent's socket is enabled.
struct RegisterScheme: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "register-scheme",
        abstract: "Register authctl as the desktop's handler for an account's private-use redirect scheme.",
        discussion: """
        For accounts whose redirect_uri is a private-use scheme (com.example.app:/path) because the provider does not \
        allow loopback redirects. Writes ~/.local/share/applications/auth-agent-<scheme>.desktop \
        (MimeType=x-scheme-handler/<scheme>, Exec=authctl callback %u) and, when xdg-mime is installed, makes it the \
        default handler for the scheme. With --all, does so for every configured account that has such a scheme \
        (none is not an error); `make install` runs it.
        """)
    @OptionGroup var global: GlobalOptions
    @Argument(help: "The account name.") var account: String?
    @Flag(help: "Every configured account with a private-use redirect scheme.") var all = false

    func validate() throws {
        guard (account != nil) != all else {
            throw ValidationError(all ? "give an account or --all, not both" : "give an account name, or --all")
        }
    }

    func run() throws {
        let client = try global.connect()
        let listing = try CLIFailure.wrap { () throws(ClientError) in try client.call(WireRequest(op: .accounts), as: AccountsResult.self) }
        let directory = try RegisterScheme.applicationsDirectory()
        guard let account else {
            var registered = 0
            for summary in listing.accounts {
                guard let scheme = SchemeHandler.privateUseScheme(of: summary.redirectURI) else { continue }
                try RegisterScheme.register(scheme: scheme, account: summary.name, in: directory)
                registered += 1
            }
            if registered == 0 {
                print("No account uses a private-use redirect scheme: nothing to register (loopback redirects need no handler).")
            }
            return
        }
        guard let summary = listing.accounts.first(where: { $0.name == account }) else {
            throw CLIFailure(message: "no account named '\(account)' is configured", hint: "see `authctl accounts`",
                             exit: ExitStatus.account)
        }
        guard let scheme = SchemeHandler.privateUseScheme(of: summary.redirectURI) else {
            throw CLIFailure(message: "account '\(account)' uses the loopback redirect \(summary.redirectURI); there is no scheme to register",
                             hint: "set redirect_uri = \"com.example.app:/oauth2/callback/\(account)\" (your reverse domain) if the provider refuses loopback",
                             exit: ExitStatus.account)
        }
        try RegisterScheme.register(scheme: scheme, account: account, in: directory)
    }

    /// `$XDG_DATA_HOME/applications` (default ~/.local/share/applications).
    static func applicationsDirectory() throws -> String {
        let environment = ProcessInfo.processInfo.environment
        guard let dataHome = environment["XDG_DATA_HOME"].flatMap({ $0.hasPrefix("/") ? $0 : nil })
                ?? environment["HOME"].map({ "\($0)/.local/share" }) else {
            throw CLIFailure(message: "neither XDG_DATA_HOME nor HOME is set", exit: ExitStatus.failure)
        }
        return "\(dataHome)/applications"
    }

    /// Writes the handler for `scheme` and makes it the default (xdg-mime) where that is installed.
    static func register(scheme: String, account: String, in directory: String) throws {
        let environment = ProcessInfo.processInfo.environment
        let name = SchemeHandler.desktopFileName(scheme: scheme)
        let entry = SchemeHandler.desktopEntry(scheme: scheme, authctlPath: RegisterScheme.ownPath())
        do {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            try Data(entry.utf8).write(to: URL(fileURLWithPath: "\(directory)/\(name)"), options: .atomic)
        } catch {
            throw CLIFailure(message: "cannot write \(directory)/\(name): \(error)", exit: ExitStatus.failure)
        }
        print("Wrote \(directory)/\(name) (account '\(account)').")
        switch RegisterScheme.run(["xdg-mime", "default", name, SchemeHandler.mimeType(scheme: scheme)], environment: environment) {
        case 0?: print("Made it the default handler for \(scheme): URIs (xdg-mime).")
        case nil: print("xdg-mime is not installed: your desktop picks the handler up from the file's MimeType.")
        case let status?:
            writeStderr("authctl: warning: xdg-mime default failed (exit \(status)); the desktop may still use the file's MimeType\n")
        }
        _ = RegisterScheme.run(["update-desktop-database", directory], environment: environment)
    }

    /// authctl's own absolute path, for `Exec=` (the desktop runs it without the shell's PATH) and for ssh's
    /// `KnownHostsCommand` (`authctl forward`).
    static func ownPath() -> String {
        var buffer = [CChar](repeating: 0, count: 4096)
        let count = readlink("/proc/self/exe", &buffer, buffer.count - 1)
        return count > 0 ? String(decoding: buffer[0..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self) : "authctl"
    }

    /// Runs a program found on PATH without a shell and returns its exit status, or nil when it is not installed.
    static func run(_ argv: [String], environment: [String: String]) -> Int32? {
        let path = environment["PATH"] ?? "/usr/local/bin:/usr/bin:/bin"
        let candidates: [String] = path.split(separator: ":").map { "\($0)/\(argv[0])" }
        guard let program = candidates.first(where: { access($0, X_OK) == 0 }) else { return nil }
        var pid = pid_t()
        var cArgs: [UnsafeMutablePointer<CChar>?] = ([program] + argv.dropFirst()).map { strdup($0) } + [nil]
        defer { for arg in cArgs { free(arg) } }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0)
        guard posix_spawn(&pid, program, &actions, nil, &cArgs, environ) == 0 else { return nil }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        return (status & 0x7f) == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
    }
}
