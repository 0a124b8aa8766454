import AgentIPC
import ArgumentParser
import AuthCLI
import ConfigFile
import FoundationEssentials
import Glibc

struct Accounts: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "accounts",
        abstract: "List, add or remove accounts.",
        discussion: """
        Examples:
          authctl accounts       # list what the running agent knows
          authctl accounts add work --issuer https://id.example \\
              --client-id ID
          authctl accounts add gmail --preset google --client-id ID \\
              --client-secret-stdin < secret.txt
          authctl accounts add m365 --preset microsoft \\
              --tenant organizations --client-id APP-ID
          authctl accounts remove work
        """,
        subcommands: [AccountsList.self, AccountsAdd.self, AccountsRemove.self], defaultSubcommand: AccountsList.self)
}

struct AccountsList: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "list", abstract: "List the configured accounts and the redirect URI to register for each.")
    @OptionGroup var global: GlobalOptions
    @Flag(help: "Print JSON.") var json = false

    func run() throws {
        let client = try global.connect()
        let result = try CLIFailure.wrap { () throws(ClientError) in try client.call(WireRequest(op: .accounts), as: AccountsResult.self) }
        if json { return printJSON(result) }
        if result.accounts.isEmpty { return print("No accounts are configured. Add one with `authctl accounts add`.") }
        let rows = [["ACCOUNT", "ISSUER", "REDIRECT URI"]] + result.accounts.map { [$0.name, $0.issuer, $0.redirectURI] }
        print(Formatter.table(rows))
    }
}

/// Options both `add` and `remove` take.
struct ConfigOptions: ParsableArguments {
    @Option(help: "The config file (default: $AUTH_AGENT_CONFIG, else $XDG_CONFIG_HOME/auth-agent/config.toml).")
    var config: String?

    func file() throws(CLIFailure) -> ConfigFile {
        guard let path = ConfigPath.resolve(explicit: config, environment: ProcessInfo.processInfo.environment)?.path else {
            throw CLIFailure(message: "cannot find the config file: neither HOME nor XDG_CONFIG_HOME is set",
                             hint: "pass --config PATH", exit: ExitStatus.usage)
        }
        return ConfigFile(path: path)
    }
}

struct AccountsAdd: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "add",
        abstract: "Add an [accounts.NAME] section to config.toml.",
        discussion: """
        Presets: google, microsoft (--tenant common|organizations|consumers|TENANT-ID), github, gitlab (gitlab.com, \
        or self-hosted with --issuer), oidc (any OpenID Connect issuer; the default when only --issuer is given). \
        The new file is checked with the agent's own loader (auth-agent --check-config) before it replaces the old \
        one; other sections and comments are kept as they are. A client secret is never taken from the command \
        line: --client-secret-stdin reads it from the first line of stdin, and presets that need one (google, \
        github) ask for it on the terminal otherwise.

        Then register the printed redirect URI at the provider, make the agent read the file \
        (authctl reload) and sign in with authctl login NAME.

        Examples:
          authctl accounts add work --issuer https://id.example \\
              --client-id ID
          authctl accounts add gitlab --preset gitlab \\
              --client-id ID --git-host gitlab.com
          authctl accounts add corp-git --preset gitlab \\
              --issuer https://git.example.com --client-id ID
          printf '%s\\n' "$SECRET" | authctl accounts add gmail \\
              --preset google --client-id ID \\
              --client-secret-stdin --scope openid \\
              --scope email --scope https://mail.google.com/
        """)
    @OptionGroup var options: ConfigOptions
    @Argument(help: "The new account's name (letters, digits, '-', '_', '.').") var name: String
    @Option(help: "google, microsoft, github, gitlab or oidc.") var preset: String?
    @Option(help: "The issuer URL (oidc; self-hosted gitlab).") var issuer: String?
    @Option(help: "Microsoft tenant: common (default), organizations, consumers, or your tenant ID.") var tenant: String?
    @Option(help: "The client ID registered at the provider.") var clientId: String
    @Flag(help: "Read the client secret from the first line of stdin.") var clientSecretStdin = false
    @Option(name: .customLong("scope"), help: "A scope to request (repeat it; replaces the preset's scopes).") var scopes: [String] = []
    @Option(name: .customLong("git-host"),
            help: "HOST, HOST:PORT or HOST/PATH-PREFIX for which `authctl git-credential` uses this account (repeat it).")
    var gitHosts: [String] = []
    @Flag(help: "Print JSON: {account, config, redirect_uri, checked, notes}.") var json = false

    func validate() throws {
        guard AccountName.isValid(name) else {
            throw ValidationError("account names may use letters, digits, '-', '_' and '.' (at most 64, not starting with '-' or '.')")
        }
        guard preset != nil || issuer != nil else { throw ValidationError("give --preset NAME or --issuer URL") }
        guard !clientId.isEmpty else { throw ValidationError("--client-id must not be empty") }
        for scope in scopes where scope.isEmpty || scope.contains(" ") {
            throw ValidationError("each --scope is one scope, without spaces")
        }
    }

    func run() throws {
        let chosen: ProviderPreset
        do throws(ProviderPreset.Failure) {
            chosen = try ProviderPreset.named(preset ?? "oidc", issuer: issuer, tenant: tenant)
        } catch {
            throw CLIFailure(message: error.description, exit: ExitStatus.usage)
        }
        let file = try options.file()
        let text = try file.read()
        if ConfigSection.defines(name, in: text) {
            throw CLIFailure(message: "account '\(name)' already exists in \(file.path)",
                             hint: "choose another name, or `authctl accounts remove \(name)` first", exit: ExitStatus.account)
        }
        let secret = try readSecret(needed: chosen.needsClientSecret)
        let section = ConfigSection.render(name: name, preset: chosen, clientID: clientId, clientSecret: secret,
                                           scopes: scopes.isEmpty ? nil : scopes, gitHosts: gitHosts)
        let checked = try file.replace(with: ConfigSection.appending(section, to: text))
        let redirect = "http://127.0.0.1/oauth2/callback/\(name)"
        var notes = chosen.notes
        if !gitHosts.isEmpty {
            notes.append("git: `git config --global credential.helper '!authctl git-credential'` serves \(gitHosts.joined(separator: ", ")) with this account.")
        }
        if !checked { notes.append("auth-agent was not found, so the file was not checked: run `auth-agent --check-config`.") }
        if json {
            struct Added: Codable {
                var account: String, config: String, redirectURI: String, checked: Bool, notes: [String]
                enum CodingKeys: String, CodingKey { case account, config, redirectURI = "redirect_uri", checked, notes }
            }
            return printJSON(Added(account: name, config: file.path, redirectURI: redirect, checked: checked, notes: notes))
        }
        var lines = ["Added account '\(name)' to \(file.path).", "",
                     "Register this redirect URI at the provider (any port; the literal 127.0.0.1, not localhost):",
                     "  \(redirect)", "",
                     "Then make the agent read the new account, and sign in:",
                     "  authctl reload                          (or: systemctl --user reload auth-agent)",
                     "  authctl login \(name)"]
        if !notes.isEmpty { lines += [""] + notes.map { "Note: \($0)" } }
        print(lines.joined(separator: "\n"))
    }

    /// The client secret: from stdin with --client-secret-stdin, else asked on the terminal (no echo) when the
    /// preset needs one. Never from argv.
    private func readSecret(needed: Bool) throws(CLIFailure) -> String? {
        if clientSecretStdin {
            guard let line = PasteReader.readBoundedLine(), !line.truncated else {
                throw CLIFailure(message: "no client secret on stdin", exit: ExitStatus.usage)
            }
            let secret = line.text.trimmingWhitespace
            guard !secret.isEmpty else { throw CLIFailure(message: "the client secret on stdin is empty", exit: ExitStatus.usage) }
            return secret
        }
        guard needed else { return nil }
        guard let secret = SecretPrompt.ask("Client secret for '\(name)' (not shown): ") else {
            throw CLIFailure(message: "the '\(preset ?? "")' preset needs the client secret and there is no terminal to ask on",
                             hint: "pipe it in with --client-secret-stdin", exit: ExitStatus.usage)
        }
        return secret
    }
}

struct AccountsRemove: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "remove",
        abstract: "Remove an account's section from config.toml.",
        discussion: """
        Its sub-tables go too, wherever they are; other sections and comments are kept. Sign out first (authctl \
        logout NAME) to revoke and delete its refresh token: the agent only knows accounts that are configured. \
        Then `authctl reload`.

        Example:
          authctl logout old && authctl accounts remove old && \\
              authctl reload
        """)
    @OptionGroup var options: ConfigOptions
    @Argument(help: "The account to remove.") var name: String
    @Flag(help: "Print JSON: {account, config, checked}.") var json = false

    func run() throws {
        let file = try options.file()
        let text = try file.read()
        guard let edited = ConfigSection.removing(name, from: text) else {
            throw CLIFailure(message: "no [accounts.\(name)] section in \(file.path)",
                             hint: "see `authctl accounts` for the configured names", exit: ExitStatus.account)
        }
        let checked = try file.replace(with: edited)
        if json {
            struct Removed: Codable { var account: String, config: String, checked: Bool }
            return printJSON(Removed(account: name, config: file.path, checked: checked))
        }
        print("""
            Removed account '\(name)' from \(file.path).
            Make the agent forget it: authctl reload (its keyring entry, if any, stays until authctl logout)
            """)
    }
}

enum AccountName {
    /// The agent's rule (AuthCore.AccountConfig.isValidName); the agent's loader checks it again.
    static func isValid(_ name: String) -> Bool {
        !name.isEmpty && name.count <= 64 && !name.hasPrefix("-") && !name.hasPrefix(".") && name.unicodeScalars.allSatisfy {
            ("a"..."z").contains($0) || ("A"..."Z").contains($0) || ("0"..."9").contains($0) || $0 == "-" || $0 == "_" || $0 == "."
        }
    }
}

extension String {
    var trimmingWhitespace: String {
        var text = Substring(self).drop(while: \.isWhitespace)
        while text.last?.isWhitespace == true { text.removeLast() }
        return String(text)
    }
}

/// Asks for a secret on the controlling terminal with echo off; nil when there is no terminal. A Ctrl-C (or a
/// hang-up or kill) at the prompt gives the terminal its echo back before authctl dies of the signal.
enum SecretPrompt {
    // For the signal handler only (async-signal-safe: tcsetattr and write), set while echo is off.
    nonisolated(unsafe) private static var quietFD: Int32 = -1
    nonisolated(unsafe) private static var echoing = termios()
    private static let signals = [SIGINT, SIGTERM, SIGHUP, SIGQUIT]

    private static let restoreAndDie: @convention(c) (Int32) -> Void = { signal in
        if SecretPrompt.quietFD >= 0 {
            tcsetattr(SecretPrompt.quietFD, TCSAFLUSH, &SecretPrompt.echoing)
            _ = write(SecretPrompt.quietFD, "\n", 1)
        }
        Glibc.signal(signal, SIG_DFL)
        raise(signal)
    }

    static func ask(_ prompt: String) -> String? {
        let fd = open("/dev/tty", O_RDWR | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var saved = termios()
        guard tcgetattr(fd, &saved) == 0 else { return nil }
        var quiet = saved
        quiet.c_lflag &= ~tcflag_t(ECHO)
        echoing = saved
        quietFD = fd
        let previous = signals.map { signal($0, restoreAndDie) }
        // Echo goes off before the prompt shows, so nothing typed after the prompt appears is echoed.
        tcsetattr(fd, TCSAFLUSH, &quiet)
        _ = Array(prompt.utf8).withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        defer {
            tcsetattr(fd, TCSAFLUSH, &saved)
            _ = write(fd, "\n", 1)
            for (number, handler) in zip(signals, previous) { signal(number, handler) }
            quietFD = -1
        }
        var bytes: [UInt8] = []
        var byte: UInt8 = 0
        while read(fd, &byte, 1) == 1, byte != 0x0A, bytes.count < 8192 { bytes.append(byte) }
        let text = String(decoding: bytes, as: UTF8.self).trimmingWhitespace
        return text.isEmpty ? nil : text
    }
}
