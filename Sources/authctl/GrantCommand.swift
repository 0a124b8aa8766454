import AgentIPC
import ArgumentParser
import AuthCLI
import FoundationEssentials
import TimeText

/// `authctl grant NAME --account ACCOUNT`: a socket of its own for a workload (a container, an AI agent's sandbox)
/// that serves it the named accounts' tokens and nothing else (``Grants`` in the agent).
struct GrantCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "grant",
        abstract: "Give a container or sandbox tokens of some accounts through a socket of its own, revocably.",
        discussion: """
        authctl grant NAME --account ACCOUNT [--account ...] [--scope SCOPE ...] [--resource URI]
                   [--max-ttl DURATION] [--for DURATION] [--while-pid PID] [--dpop-url RULE ...]
                   [--lock-with-session]
                                          makes grant NAME and prints the directory to mount into the workload
        authctl grant --list [--json]     shows the grants, their accounts, limits and use
        authctl grant --revoke NAME       ends grant NAME now: its socket and connections close

        Whatever connects to a grant's socket is that grant: it gets tokens (and DPoP proofs) of the grant's \
        accounts only, never a sign-in, status of other accounts, approvals or configuration. With --scope or \
        --resource its tokens carry only those, never more: from the account's sign-in where it has \
        scoped_tokens = true, else from a sign-in of the grant's own (your browser, once), revoked with the grant. \
        With --max-ttl its tokens come from a sign-in of its own, and each is revoked at the server at that age. \
        Mount the directory \
        and point AUTH_AGENT_SOCKET at the socket inside, e.g. podman run -v DIR:/run/auth-agent:ro \
        -e AUTH_AGENT_SOCKET=/run/auth-agent/socket ... A grant lasts until --for is up, the --while-pid process \
        exits, or --revoke, across agent restarts. Any program of yours that can reach the socket can use it while \
        it lasts. `authctl token ACCOUNT --grant NAME` asks as the grant (for hooks run on the desktop on behalf \
        of a sandbox). See docs/INTEGRATIONS.md, "Containers and AI agents".
        """)

    @OptionGroup var global: GlobalOptions
    @Argument(help: ArgumentHelp("The grant's name: letters, digits, '-', '_', '.'.", valueName: "name")) var name: String?
    @Option(name: .customLong("account"), help: ArgumentHelp("An account it serves (repeat for more).", valueName: "account"))
    var accounts: [String] = []
    @Option(name: .customLong("for"), help: ArgumentHelp("How long it lasts: 90s, 15m, 8h, 2d.", valueName: "duration"))
    var lifetime: String?
    @Option(name: .customLong("while-pid"), help: ArgumentHelp("It ends when this process exits.", valueName: "pid"))
    var whilePID: Int?
    @Option(name: .customLong("dpop-url"), help: ArgumentHelp("Sign DPoP proofs only for requests under this URL prefix, with these methods if given (repeat for more; DPoP-bound accounts only).", valueName: "[METHOD[,METHOD] ]url"))
    var dpopURLs: [String] = []
    @Option(name: .customLong("scope"), help: ArgumentHelp("Its tokens carry only these of the accounts' scopes (repeat for more).", valueName: "scope"))
    var scopes: [String] = []
    @Option(help: ArgumentHelp("Its tokens are for this resource only (RFC 8707).", valueName: "uri"))
    var resource: String?
    @Option(name: .customLong("max-ttl"), help: ArgumentHelp("Each token handed through it is revoked at this age: 5m, 1h.", valueName: "duration"))
    var maxTTL: String?
    @Flag(name: .customLong("lock-with-session"), help: "Not served while your session is locked (logind's hint, or `authctl lock`).")
    var lockWithSession = false
    @Flag(help: "Show the grants.") var list = false
    @Option(help: ArgumentHelp("End grant NAME now.", valueName: "name")) var revoke: String?
    @Flag(help: "Print JSON (the protocol's grant or status members).") var json = false

    func validate() throws {
        let modes = [list, revoke != nil, name != nil]
        guard modes.filter({ $0 }).count == 1 else {
            throw ValidationError("give a NAME with --account, or one of --list and --revoke NAME")
        }
        if name != nil, accounts.isEmpty { throw ValidationError("a grant needs at least one --account") }
        if name == nil, !accounts.isEmpty || lifetime != nil || whilePID != nil || !dpopURLs.isEmpty || lockWithSession
            || !scopes.isEmpty || resource != nil || maxTTL != nil {
            throw ValidationError("--account, --scope, --resource, --max-ttl, --for, --while-pid, --dpop-url and --lock-with-session make a grant: give its NAME")
        }
        if let lifetime, DurationText.seconds(lifetime).map({ $0 > 0 }) != true {
            throw ValidationError("--for takes a duration like 90s, 15m, 8h or 2d")
        }
        if let whilePID, whilePID <= 0 { throw ValidationError("--while-pid takes a process id") }
        if let maxTTL, DurationText.seconds(maxTTL).map({ $0 > 0 }) != true {
            throw ValidationError("--max-ttl takes a duration like 90s, 15m or 1h")
        }
    }

    func run() throws {
        if list { return try listGrants() }
        if let revoke {
            let client = try global.connect()
            let result = try CLIFailure.wrap { () throws(ClientError) in
                try client.call(WireRequest(op: .grantRevoke) { $0.grant = revoke }, as: GrantResult.self)
            }
            if json { return printJSON(result) }
            let handedOut = result.grant.ownSignIns == nil
                ? "tokens already handed out stay valid until they expire"
                : "its own sign-in and tokens are being revoked at the server"
            return print(TerminalText.safe("revoked grant '\(result.grant.name)': its socket and connections are closed; \(handedOut)"))
        }
        guard let name else { return }
        // A narrower grant of an account whose server would shrink the account's own sign-in gets a sign-in of its
        // own, in the browser (or with a device code), announced as `authctl login` announces one. Bounded as a
        // network call until the agent says a sign-in started; its event's timeout then extends the wait.
        let choice = SignInChoice.choose(device: false, noBrowser: false, environment: ProcessInfo.processInfo.environment)
        let signing = try global.connect(.network)
        var countdown: Countdown?
        let result: GrantResult
        do {
            defer { countdown?.stop() }
            result = try CLIFailure.wrap { () throws(ClientError) in
                try signing.call(WireRequest(op: .grant) {
                    $0.grant = name; $0.accounts = accounts; $0.lifetime = lifetime.flatMap(DurationText.seconds)
                    $0.pid = whilePID; $0.dpopURLs = dpopURLs.isEmpty ? nil : dpopURLs
                    if lockWithSession { $0.lockWithSession = true }
                    $0.scopes = scopes.isEmpty ? nil : scopes; $0.resource = resource
                    $0.maxTTL = maxTTL.flatMap(DurationText.seconds)
                    $0.method = choice.wireMethod?.rawValue
                }, as: GrantResult.self) { event in
                    let who = "\(accounts.joined(separator: "', '"))' for grant '\(name)"
                    if event.type == WireEvent.deviceCode {
                        if countdown == nil { countdown = Terminal.announceDevice(event, account: who) }
                        return
                    }
                    Terminal.announce(event, account: who)
                    if countdown == nil, event.type == WireEvent.loginStarted { countdown = Countdown.start(seconds: event.timeoutSeconds ?? 300) }
                }
            }
        }
        if json { return printJSON(result) }
        let grant = result.grant
        print(TerminalText.safe("""
            grant '\(grant.name)' serves \(grant.accounts.joined(separator: ", ")) \(GrantCommand.lasts(grant, now: Int(Date().timeIntervalSince1970)))
            \(GrantCommand.narrowing(grant).map { "tokens:  \($0)\n" } ?? "")\(grant.ownSignIns.map { "sign-in: its own for \($0.joined(separator: ", ")), revoked at the server with the grant\n" } ?? "")\(grant.dpopURLs.map { "proofs:  only for \($0.joined(separator: "; "))\n" } ?? "")socket:  \(grant.socket)
            mount:   -v \(grant.directory):/run/auth-agent:ro -e AUTH_AGENT_SOCKET=/run/auth-agent/socket
            revoke:  authctl grant --revoke \(grant.name)
            """))
    }

    private func listGrants() throws {
        let client = try global.connect()
        let status = try CLIFailure.wrap { () throws(ClientError) in try client.call(WireRequest(op: .status), as: StatusResult.self) }
        if let confined = ConfinedView(status) {
            throw CLIFailure(message: "grants are made and listed on \(confined.desktop), not from \(confined.itself)",
                             hint: "run `authctl grant --list` there", exit: ExitStatus.protocolError)
        }
        let grants = status.grants ?? []
        if json { return printJSON(grants) }
        guard !grants.isEmpty else { return print("no grants") }
        let now = Int(Date().timeIntervalSince1970)
        print(TerminalText.safe(Formatter.table([["NAME", "ACCOUNTS", "LASTS", "USES", "LAST USE", "SOCKET"]] + grants.map {
            [$0.name, $0.accounts.joined(separator: ",") + (GrantCommand.narrowing($0).map { " (\($0))" } ?? ""),
             GrantCommand.lasts($0, now: now), String($0.uses),
             $0.lastUse.map { Formatter.relative($0, now: now) } ?? "-", $0.socket]
        })))
    }

    /// What a grant narrows its tokens to, for people: `scopes openid email, resource https://api.example`; nil: nothing.
    static func narrowing(_ grant: StatusResult.Grant) -> String? {
        let parts = [grant.scopes.map { "scopes \($0.joined(separator: " "))" }, grant.resource.map { "resource \($0)" },
                     grant.maxTTL.map { "each revoked after \(Formatter.duration($0))" }].compactMap { $0 }
        return parts.isEmpty ? nil : parts.joined(separator: ", ")
    }

    /// How long a grant lasts, for people: `until revoked`, `for 7h 59m`, `while pid 1234 runs`.
    static func lasts(_ grant: StatusResult.Grant, now: Int) -> String {
        var parts: [String] = []
        if let expires = grant.expires { parts.append("until \(LocalTime.text(expires)) (\(Formatter.relative(expires, now: now)))") }
        if let pid = grant.whilePID { parts.append("while pid \(pid) runs") }
        let locks = grant.lockWithSession == true ? ", not while your session is locked" : ""
        return (parts.isEmpty ? "until revoked" : parts.joined(separator: ", ")) + locks
    }
}
