import AgentIPC
import ArgumentParser
import AuthCLI
import SessionEnvironment
import ConfigFile
import FoundationEssentials
import Glibc

/// `authctl doctor`: checks what signing in and getting tokens depend on, one line each, with a hint.
struct DoctorCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "doctor",
        abstract: "Check the agent, keyring, browser, each account's authorization server and the clock.",
        discussion: """
        One line per check: ok, warn, fail (or skip, when it cannot be checked), and a hint for anything not ok. \
        The account checks run inside the agent, with the code it signs in with: the discovery document is fetched \
        afresh and validated, the signing keys (JWKS) of accounts with 'openid' are fetched, and the server's \
        HTTP Date header is compared with this machine's clock (warn beyond 60 s, fail beyond 300 s). \
        When the agent is not running, the local checks still run and the hint says how to start it.

        Examples:
          authctl doctor
          authctl doctor work      # only the account 'work'
          authctl doctor --json    # {"ok": true, "checks": [...]}

        Exit codes: 0 no check failed (warnings allowed), 1 at least one check failed, 2 usage, \
        8 unknown account.
        """)
    @OptionGroup var global: GlobalOptions
    @Argument(help: "Check only this account.") var account: String?
    @Option(help: "The config file to check (default: as the agent finds it).") var config: String?
    @Flag(help: "Print JSON: {ok, checks: [{check, account?, status, message, hint?}]}.") var json = false

    /// The agent answered the ping but not the checks: an agent too old to know `diagnose` is a skip; anything else
    /// (no answer in time, a busy or failing agent) is a failure, so doctor never says "no failure" about checks
    /// nobody ran.
    static func unchecked(_ error: ClientError) -> DoctorCheck {
        let message = "the agent cannot run its checks: \(CLIFailure(error).message)"
        if case .agent(let wire) = error, wire.knownCode == .unknownOp {
            return DoctorCheck("diagnose", .skip, message,
                               hint: "an older agent: restart it after upgrading (`systemctl --user restart auth-agent`)")
        }
        if case .timeout = error {
            return DoctorCheck("diagnose", .fail, message,
                               hint: "an authorization server that does not answer holds its account's checks up to 15 s; --timeout SECONDS waits longer")
        }
        return DoctorCheck("diagnose", .fail, message, hint: CLIFailure(error).hint)
    }

    func run() throws {
        let environment = ProcessInfo.processInfo.environment
        var checks: [DoctorCheck] = []
        var diagnosis: DiagnoseResult?
        switch connectAgent() {
        case .failure(let failure):
            checks.append(failure.check)
        case .success(let (client, ping, socket)):
            checks += Doctor.agent(ping, socket: socket, authctlVersion: authctlVersion)
            // A host through a forward, or an app: the agent refuses it `diagnose` and the desktop's checks mean
            // nothing here. It is told what it is to the agent, the accounts it may use, and where the rest is checked.
            if let status = try? client.call(WireRequest(op: .status), as: StatusResult.self),
               let confined = ConfinedView(status) {
                return report(checks + confined.doctorChecks(status, account: account))
            }
            checks += DoctorCommand.forwards(client)
            do throws(ClientError) {
                diagnosis = try client.call(WireRequest(op: .diagnose) { $0.account = account }, as: DiagnoseResult.self)
            } catch {
                if case .agent(let wire) = error, wire.knownCode == .unknownAccount { throw CLIFailure(error) }
                checks.append(DoctorCommand.unchecked(error))
            }
        }
        if let diagnosis {
            checks += Doctor.keyring(diagnosis.keyring, service: diagnosis.keyringService, advice: diagnosis.keyringAdvice,
                                     store: diagnosis.store,
                                     keptInMemory: diagnosis.keptInMemory ?? [])
            checks.append(Doctor.browser(program: diagnosis.browser.program, source: diagnosis.browser.source,
                                                 problem: diagnosis.browser.problem, fromAgent: true))
            if let tpm = diagnosis.tpm { checks.append(Doctor.tpm(tpm)) }
        } else {
            checks.append(DoctorCheck("keyring", .skip, "not checked: the agent looks at the keyring"))
            let found = BrowserCommand.resolve(environment: environment)
            checks.append(Doctor.browser(program: found?.path, source: found?.source,
                                                 problem: BrowserCommand.notFoundMessage, fromAgent: false))
        }
        let session = SessionKind(environment: environment)
        // The agent's view of the display when it can say (the browser is its to start), else this shell's.
        if let display = diagnosis.flatMap({ Doctor.agentDisplay(display: $0.browser.display, wayland: $0.browser.waylandDisplay,
                                                                source: $0.browser.displaySource, ssh: session.ssh) }) {
            checks.append(display)
        } else {
            checks.append(Doctor.session(ssh: session.ssh, headless: session.headless))
        }
        if let path = ConfigPath.resolve(explicit: config, environment: environment)?.path {
            var info = stat()
            let exists = stat(path, &info) == 0
            checks.append(Doctor.config(path: path, mode: exists ? UInt32(info.st_mode) & 0o7777 : nil,
                                                ownedByUser: exists && info.st_uid == getuid()))
        }
        if let diagnosis {
            if diagnosis.accounts.isEmpty {
                checks.append(DoctorCheck("accounts", .warn, "no accounts are configured",
                                          hint: "add one: `authctl accounts add NAME --preset ... --client-id ...`, then restart the agent"))
            }
            for account in diagnosis.accounts { checks += Doctor.account(account) }
        } else {
            checks.append(DoctorCheck("accounts", .skip, "authorization servers not checked: the agent checks them"))
        }
        report(checks)
    }

    private func report(_ checks: [DoctorCheck]) {
        let report = DoctorReport(checks: checks)
        if json {
            printJSON(report)
        } else {
            print(Formatter.doctor(report, color: Terminal.wantsColor))
        }
        if !report.ok { Glibc.exit(ExitStatus.failure) }
    }

    /// The forwards checks, from the last day's audit and `status`: unknown forwards or the open ones, and pinned
    /// host entries whose host now presents another key (none when there is nothing to say, or the agent does not
    /// answer them: a host or an app asking is not shown the audit).
    static func forwards(_ client: AgentClient) -> [DoctorCheck] {
        let since = Int(Date().timeIntervalSince1970) - 86400
        guard let audit = try? client.call(WireRequest(op: .audit) { $0.since = since }, as: AuditResult.self),
              let status = try? client.call(WireRequest(op: .status), as: StatusResult.self) else { return [] }
        let unknown = audit.entries.filter { $0.reason == "unknown_forward" }.count
        let pins = Dictionary(status.accounts.compactMap { account in account.access?.allowedClients.map { (account.name, $0) } },
                              uniquingKeysWith: { first, _ in first })
        return [Doctor.forwards(unknown: unknown, open: (status.forwards ?? []).map { $0.alias ?? $0.host })].compactMap { $0 }
            + Doctor.changedHostKeys(audit.entries, allowedClients: pins)
            + status.accounts.flatMap { Doctor.neverMatching(account: $0.name, $0.access?.neverMatching ?? []) }
    }

    /// The agent, its `ping`, and the socket path; or the failed `agent` check.
    private func connectAgent() -> Result<(AgentClient, PingResult, String), DoctorCheckFailure> {
        let socket: String
        do throws(CLIFailure) { socket = try global.path() } catch {
            return .failure(DoctorCheckFailure(check: DoctorCheck("agent", .fail, error.message, hint: error.hint)))
        }
        do throws(ClientError) {
            let client = try AgentClient(path: socket, replyTimeout: AgentConnection.replyLimit(.network, timeout: global.timeout))
            let ping = try client.call(WireRequest(op: .ping), as: PingResult.self)
            return .success((client, ping, socket))
        } catch {
            if case .agentNotRunning = error {
                if let sandboxed = FlatpakSandbox.unreachable(socket: socket) {
                    return .failure(DoctorCheckFailure(check: DoctorCheck("agent", .fail, sandboxed.message, hint: sandboxed.hint)))
                }
                return .failure(DoctorCheckFailure(check: Doctor.agentNotRunning(socket: socket, reason: "nothing listens on \(socket)")))
            }
            let failure = CLIFailure(error)
            return .failure(DoctorCheckFailure(check: DoctorCheck("agent", .fail, failure.message, hint: failure.hint)))
        }
    }
}

struct DoctorCheckFailure: Error {
    var check: DoctorCheck
}
