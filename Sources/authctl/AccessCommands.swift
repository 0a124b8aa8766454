import AgentIPC
import ArgumentParser
import AuthCLI
import TimeText
import FoundationEssentials

/// `authctl audit`: who got which account's tokens, and who was refused.
struct Audit: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "audit",
        abstract: "Show who got tokens and who was refused (the agent's in-memory audit trail).",
        discussion: """
        Every token the agent hands out and every refused request is recorded with the time, account, scopes or \
        resource, the caller's identity as the kernel reports it (executable, systemd unit, Flatpak app, pid) and \
        the outcome. The agent keeps the most recent records in memory; all of them go to its log (the journal). \
        Tokens are never recorded.
        """)
    @OptionGroup var global: GlobalOptions
    @Option(help: "Only this account's records.") var account: String?
    @Option(help: "Only records from this long ago on: 90s, 15m, 1h, 2d.") var since: String?
    @Flag(help: "Print JSON (the protocol's audit result).") var json = false

    func validate() throws {
        if let since, DurationText.seconds(since) == nil { throw ValidationError("--since takes a duration like 90s, 15m, 1h or 2d") }
    }

    func run() throws {
        let client = try global.connect()
        let from = since.flatMap(DurationText.seconds).map { Int(Date().timeIntervalSince1970) - $0 }
        // The agent sends the newest records first, a page a line; each page's `next` asks for the one before it.
        // Cursors must fall, and the ring holds at most `capacity` records, so a misbehaving agent cannot loop us.
        let result = try CLIFailure.wrap { () throws(ClientError) -> AuditResult in
            var pages: [AuditResult] = []
            var cursor: Int?
            while true {
                let page = try client.call(WireRequest(op: .audit) { $0.account = account; $0.since = from; $0.before = cursor },
                                           as: AuditResult.self)
                pages.append(page)
                guard let next = page.next else { return AuditResult.joined(pages) }
                guard cursor.map({ next < $0 }) ?? true, pages.count <= max(page.capacity, 1) else {
                    throw .protocolViolation("the agent's audit pages do not end")
                }
                cursor = next
            }
        }
        if json { return printJSON(result) }
        guard !result.entries.isEmpty else { return print("No audit records\(account.map { " for '\($0)'" } ?? "") yet.") }
        print(TerminalText.safe(Formatter.table([AuditFormat.header] + result.entries.map(AuditFormat.row))))
    }
}

/// `authctl pending`: requests waiting for the user's Allow/Deny.
struct Pending: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "pending", abstract: "List requests waiting for your permission (confirm = \"first-use\").")
    @OptionGroup var global: GlobalOptions
    @Flag(help: "Print JSON.") var json = false

    func run() throws {
        let client = try global.connect()
        let result = try CLIFailure.wrap { () throws(ClientError) in try client.call(WireRequest(op: .pending), as: PendingResult.self) }
        if json { return printJSON(result) }
        guard !result.requests.isEmpty else { return print("No requests are waiting for your permission.") }
        print(TerminalText.safe(Formatter.table([["ID", "ACCOUNT", "CALLER", "EXPIRES"]] + result.requests.map {
            [String($0.id), $0.account, AuditFormat.who($0.caller) + ($0.appName.map { " (\"\(WireCaller.shown($0))\" as installed)" } ?? ""),
             "in \(Formatter.duration($0.expiresIn))"]
        })))
        // A host allowed before under another key is not just a new host: say so, with both keys.
        for request in result.requests {
            guard let previous = request.previousHostKey else { continue }
            let host = request.caller.hostAlias ?? request.caller.host ?? request.client
            print(TerminalText.safe("\nRequest \(request.id): the host key of \(host) changed: you allowed it before with host key "
                + "\(previous), and it now presents \(request.caller.hostKey ?? "another"). Approve it only if you expected the change "
                + "(the host was reinstalled or its key replaced); if not, someone else may answer as \(host)."))
        }
        print("\nAnswer with `authctl approve ID` or `authctl deny ID`; the answer is remembered until `authctl forget`.")
        let runs = result.requests.compactMap { request in request.run.map { "\(request.id) (\($0))" } }
        if !runs.isEmpty {
            print(TerminalText.safe("`authctl approve --this-run ID` allows only the run that asks, not remembered: \(runs.joined(separator: ", "))."))
        }
    }
}

/// `authctl approve ID` / `authctl deny ID`.
struct Approve: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "approve",
        abstract: "Allow a waiting request's program to get the account's tokens (remembered).",
        discussion: "Run it in a terminal: the agent takes answers only from programs with a controlling terminal.")
    @OptionGroup var global: GlobalOptions
    @Argument(help: "The request's id (see `authctl pending`).") var id: Int
    @Flag(name: .customLong("this-run"),
          help: "Allow it for this run only (its Flatpak app's instance, or its ssh forward session): not remembered.")
    var thisRun = false
    @Flag(help: "Print JSON.") var json = false
    func run() throws { try answer(global: global, id: id, allow: true, thisRun: thisRun, json: json) }
}

struct Deny: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "deny",
        abstract: "Refuse a waiting request's program the account's tokens (remembered).",
        discussion: "Run it in a terminal: the agent takes answers only from programs with a controlling terminal.")
    @OptionGroup var global: GlobalOptions
    @Argument(help: "The request's id (see `authctl pending`).") var id: Int
    @Flag(help: "Print JSON.") var json = false
    func run() throws { try answer(global: global, id: id, allow: false, json: json) }
}

private func answer(global: GlobalOptions, id: Int, allow: Bool, thisRun: Bool = false, json: Bool) throws {
    let client = try global.connect()
    let result = try CLIFailure.wrap { () throws(ClientError) in
        try client.call(WireRequest(op: allow ? .approve : .deny) { $0.request = id; $0.thisRun = thisRun ? true : nil },
                        as: ConsentResult.self)
    }
    if json { return printJSON(result) }
    if result.thisRun == true {
        return print(TerminalText.safe("Allowed \(result.client) for '\(result.account)' for this run only (asked again in its next run)."))
    }
    print(TerminalText.safe("\(result.allowed ? "Allowed" : "Denied") \(result.client) for '\(result.account)' (remembered; `authctl forget` undoes it)."))
}

/// `authctl forget`: drop remembered Allow/Deny decisions.
struct Forget: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "forget",
        abstract: "Forget remembered Allow/Deny decisions, so those programs are asked again.")
    @OptionGroup var global: GlobalOptions
    @Option(help: "Only this account's decisions.") var account: String?
    @Option(help: "Only this program's decisions (an executable path, flatpak:APP-ID, or ssh:HOST: every key of that host).") var client: String?
    @Flag(help: "Print JSON.") var json = false

    func run() throws {
        let agent = try global.connect()
        let result = try CLIFailure.wrap { () throws(ClientError) in
            try agent.call(WireRequest(op: .forget) { $0.account = account; $0.client = client }, as: ForgetResult.self)
        }
        if json { return printJSON(result) }
        guard !result.forgotten.isEmpty else { return print("No remembered decisions matched.") }
        for decision in result.forgotten {
            print(TerminalText.safe("Forgot: \(decision.allowed ? "allow" : "deny") \(decision.client) for '\(decision.account)'."))
        }
    }
}
