import AgentIPC

/// What a confined caller (a host through `authctl forward`, a Flatpak app, a container) is told about itself, from
/// the agent's `status` (`view`, `named_by`, `agent.hostname`): `status`'s `seen as:` line, `doctor` there, and the
/// refusal of the verbs that belong to the desktop. Pure: the tests feed it results.
public struct ConfinedView: Sendable, Equatable {
    public var view: String
    public var namedBy: String?
    /// The computer the agent runs on, by its host name; nil when the agent did not say.
    public var agentHost: String?

    /// Nil when the status is not a confined caller's.
    public init?(_ status: StatusResult) {
        guard status.isConfinedView, let view = status.view else { return nil }
        self.view = view
        self.namedBy = status.namedBy
        self.agentHost = status.agent.hostname
    }

    /// Where the agent runs, for people: `desk-1 (the computer where the agent runs)`.
    public var desktop: String {
        agentHost.map { "\($0) (the computer where the agent runs)" } ?? "the computer where the agent runs"
    }

    /// What this caller is, to the agent: `a host reached through `authctl forward` from desk-1, named ssh:build-box`.
    public var summary: String {
        let name = namedBy.map { ", named \($0) in allowed_clients" } ?? ", named by no allowed_clients entry"
        let from = agentHost.map { " from \($0)" } ?? ""
        switch WireCaller.Kind(rawValue: view) {
        case .grant?: return "a workload through grant '\(namedBy ?? "?")'\(from), served that grant's accounts only"
        case .sshHost?: return "a host reached through `authctl forward`\(from)\(name)"
        case .sshUnknown?:
            return "a host reached through a forward of the agent's socket not made by `authctl forward`\(from)\(name)"
        case .flatpak?: return "an app inside its Flatpak sandbox\(name)"
        case .container?: return "a container\(name)"
        case .unidentified?: return "a caller the agent cannot identify\(name)"
        default: return "a confined caller (\(view))\(name)"
        }
    }

    /// What this caller is, briefly: `this host`, `this app`.
    public var itself: String {
        switch WireCaller.Kind(rawValue: view) {
        case .sshHost?, .sshUnknown?: return "this host"
        case .flatpak?: return "this app"
        case .container?: return "this container"
        case .grant?: return "this grant"
        default: return "this caller"
        }
    }

    /// What to do when no account serves this caller.
    public var noAccountsHint: String {
        if WireCaller.Kind(rawValue: view) == .grant {
            return "the grant's accounts are not signed in, or it has ended; on \(desktop), see `authctl grant --list`"
        }
        guard let namedBy else {
            return "the agent cannot name \(itself), so no account serves it; see `authctl audit` on \(desktop)"
        }
        return "on \(desktop), list \"\(namedBy)\" in an account's allowed_clients (an account without allowed_clients asks there when \(itself) first asks for a token)"
    }

    /// `authctl status`'s lines for the caller: after the agent's, instead of its socket and keyring.
    public var statusLines: [String] {
        ["seen as: \(summary)",
         "shown:   the accounts that serve \(itself) now; the agent's socket, keyring and forwards stay on \(agentHost ?? "the desktop")"]
    }

    /// `authctl doctor` for a confined caller: the agent answers (the caller's own checks before these), how the
    /// agent sees the caller, each account it may use, and where the rest is checked. Nothing here needs `diagnose`,
    /// which the agent refuses a confined caller.
    public func doctorChecks(_ status: StatusResult, account: String?) -> [DoctorCheck] {
        var checks = [DoctorCheck("view", .ok, summary)]
        let accounts = status.accounts.filter { account == nil || $0.name == account }
        if accounts.isEmpty {
            let what = account.map { "account '\($0)' does not serve \(itself) now (or does not exist)" }
                ?? "no account serves \(itself) now"
            checks.append(DoctorCheck("accounts", .warn, what, hint: noAccountsHint))
        }
        for entry in accounts { checks.append(accountCheck(entry)) }
        checks.append(DoctorCheck("desktop", .skip,
                                  "the keyring, browser, configuration and authorization servers are checked on \(desktop)",
                                  hint: "run `authctl doctor` there"))
        return checks
    }

    private func accountCheck(_ account: StatusResult.Account) -> DoctorCheck {
        let name = account.name
        let signIn = "sign in on \(desktop): `authctl login \(name)`"
        if account.loginPending {
            return DoctorCheck("tokens", account: name, .warn, "a sign-in is under way on \(desktop)",
                               hint: "finish it there, then run `authctl token \(name)` here again")
        }
        switch account.signedIn {
        case false?:
            return DoctorCheck("tokens", account: name, .warn, "not signed in; sign-ins do not happen here", hint: signIn)
        case nil:
            return DoctorCheck("tokens", account: name, .warn, "the agent cannot read its keyring now",
                               hint: "run `authctl status` on \(desktop)")
        case true?:
            break
        }
        if account.signInEnded == true {
            return DoctorCheck("tokens", account: name, .warn, "the sign-in ended; sign-ins do not happen here", hint: signIn)
        }
        if let error = account.lastError {
            return DoctorCheck("tokens", account: name, .warn, "last error: \(error.code): \(error.message)",
                               hint: "run `authctl doctor \(name)` on \(desktop)")
        }
        return DoctorCheck("tokens", account: name, .ok, "signed in; `authctl token \(name)` gets its tokens here")
    }
}
