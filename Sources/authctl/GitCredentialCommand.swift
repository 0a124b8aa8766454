import AgentIPC
import ArgumentParser
import AuthCLI
import Glibc

/// `authctl git-credential`: git's credential-helper protocol (gitcredentials(7)) over the agent.
struct GitCredentialCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "git-credential",
        abstract: "A git credential helper: answers with an access token from the agent.",
        discussion: """
        git runs this with the request (protocol, host, path, ...) on stdin. \
        For 'get', authctl prints username=, password= (a fresh access token) \
        and password_expiry_utc=, then a blank line. 'store' and 'erase' (and \
        any other action) read the request and do nothing: the agent owns the \
        tokens, so there is nothing for git to store or forget.

        The token is sent only for https, or for plain http to 127.0.0.1 or \
        [::1]. If the account must sign in (or anything else fails), nothing is \
        printed on stdout, the reason goes to stderr and the exit code is \
        non-zero (4: sign-in required; see `authctl --help`). git then tries \
        its other helpers, or prompts.

        Set it up for one host only, so the token never goes elsewhere:
          git config --global credential.https://gitlab.com.helper \\
            '!authctl git-credential --account gitlab'
        Two accounts on one host: let git pass the path, scope by path.
          git config --global credential.https://gitlab.com.useHttpPath true
          git config --global credential.https://gitlab.com/team.helper \\
            '!authctl git-credential --account team'

        One helper line for several hosts: leave out --account and list the hosts \
        in each account's git_hosts in config.toml (HOST, HOST:PORT or \
        HOST/PATH-PREFIX; the most specific entry wins, a tie is an error):
          git config --global credential.helper '!authctl git-credential'
        With no matching account, nothing is printed and git moves on.

        Usernames: GitLab requires 'oauth2' (the default) with an OAuth access \
        token; GitHub accepts any username with a token ('--username \
        x-access-token' is the form GitHub documents for app tokens).
        """)

    @OptionGroup var global: GlobalOptions
    @Option(help: "The account whose access token git gets (default: the account whose git_hosts matches the request).")
    var account: String?
    @Option(help: "The username to give git.") var username = GitCredentialArguments.defaultUsername
    @Option(help: "The token must stay valid at least this many seconds.") var minValid = GitCredentialArguments.defaultMinValid
    @Argument(help: "git's action: get, store or erase.") var action: String

    func validate() throws {
        guard GitCredentialReply.isSafeValue(username), !username.isEmpty else {
            throw ValidationError("--username must be non-empty and on one line")
        }
        guard minValid >= 0 else { throw ValidationError("--min-valid must be zero or more seconds") }
    }

    /// The options as the fast path would have parsed them (``GitCredentialArguments/parse(_:)``).
    var arguments: GitCredentialArguments {
        GitCredentialArguments(action: action, socket: global.socket, account: account, username: username, minValid: minValid,
                               timeout: global.timeout)
    }

    func run() throws { try Self.run(arguments) }

    /// The helper's work, for both parsers (the fast path calls it too).
    static func run(_ options: GitCredentialArguments) throws(CLIFailure) {
        let request: GitCredentialRequest
        do {
            request = try GitCredentialRequest.parse(try readRequest())
        } catch {
            throw CLIFailure(message: error.description, hint: "authctl git-credential reads git's credential format on stdin",
                             exit: ExitStatus.usage)
        }
        // gitcredentials(7): helpers ignore actions they do not know. store/erase: the agent owns the tokens.
        guard options.action == "get" else { return }
        if let refusal = request.refusal {
            throw CLIFailure(message: refusal, hint: "scope the helper to https URLs: credential.https://HOST.helper",
                             exit: ExitStatus.failure)
        }
        let client = try AgentConnection.connect(socket: options.socket, patience: .network, timeout: options.timeout)
        let account: String
        if let named = options.account { account = named } else { account = try accountForHost(request, client: client) }
        // A first-use question (confirm = "first-use") is said on stderr, which git shows: what to run to answer it.
        let result = try CLIFailure.wrap { () throws(ClientError) in
            try client.call(WireRequest(op: .token) { $0.account = account; $0.minValid = options.minValid }, as: TokenResult.self) {
                Terminal.announce($0, account: account)
            }
        }
        let reply = GitCredentialReply(username: options.username, token: result)
        do {
            print(try reply.encoded(), terminator: "")
        } catch {
            throw CLIFailure(message: error.description, exit: ExitStatus.protocolError)
        }
    }

    /// The account whose `git_hosts` matches the request, as the agent knows its accounts (authctl reads no TOML).
    private static func accountForHost(_ request: GitCredentialRequest, client: AgentClient) throws(CLIFailure) -> String {
        let known = try CLIFailure.wrap { () throws(ClientError) in try client.call(WireRequest(op: .accounts), as: AccountsResult.self) }
        let entries = known.accounts.flatMap { account in (account.gitHosts ?? []).map { (account: account.name, pattern: $0) } }
        let target = [request.host, request.path].compactMap { $0 }.joined(separator: "/")
        switch GitHostMap.account(for: request, entries: entries) {
        case .account(let name): return name
        case .none:
            throw CLIFailure(message: "no account lists \(target) in its git_hosts",
                             hint: "add git_hosts = [\"\(request.host ?? "HOST")\"] to the account in config.toml and restart the agent, or pass --account",
                             exit: ExitStatus.account)
        case .ambiguous(let names):
            throw CLIFailure(message: "accounts \(names.joined(separator: " and ")) both match \(target) in their git_hosts",
                             hint: "make one entry more specific (HOST/PATH-PREFIX with credential.useHttpPath), or pass --account",
                             exit: ExitStatus.account)
        }
    }

    /// Reads stdin up to the blank line that ends the request, or its end, at most a little over the size cap
    /// (the parser then refuses it).
    private static func readRequest() throws(GitCredentialInputError) -> [UInt8] {
        var buffer: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 64 * 1024)
        while !GitCredentialRequest.isComplete(buffer) {
            guard buffer.count <= GitCredentialRequest.maxInputBytes else { throw .inputTooLarge(limit: GitCredentialRequest.maxInputBytes) }
            let n = chunk.withUnsafeMutableBytes { Glibc.read(STDIN_FILENO, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { break }
            buffer.append(contentsOf: chunk[0..<n])
        }
        return buffer
    }
}
