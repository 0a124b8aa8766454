import AgentIPC

/// One line of `authctl doctor`: what was checked, the verdict, what was seen, and what to do about it.
public struct DoctorCheck: Codable, Sendable, Equatable {
    public enum Status: String, Codable, Sendable, Equatable {
        /// `skip`: could not be checked (the agent is not running, or it is too old to say).
        case ok, warn, fail, skip
    }

    public var check: String
    /// Set for the checks of one account.
    public var account: String?
    public var status: Status
    public var message: String
    public var hint: String?

    public init(_ check: String, account: String? = nil, _ status: Status, _ message: String, hint: String? = nil) {
        self.check = check
        self.account = account
        self.status = status
        self.message = message
        self.hint = hint
    }
}

/// `authctl doctor --json`: `ok` is false when any check failed (exit 1).
public struct DoctorReport: Codable, Sendable, Equatable {
    public var ok: Bool
    public var checks: [DoctorCheck]

    public init(checks: [DoctorCheck]) {
        self.checks = checks
        self.ok = !checks.contains { $0.status == .fail }
    }

    public var summary: String {
        let failures = checks.filter { $0.status == .fail }.count
        let warnings = checks.filter { $0.status == .warn }.count
        if failures == 0 && warnings == 0 { return "All checks passed." }
        func count(_ n: Int, _ word: String) -> String { "\(n) \(word)\(n == 1 ? "" : "s")" }
        return [failures > 0 ? count(failures, "failure") : nil, warnings > 0 ? count(warnings, "warning") : nil]
            .compactMap { $0 }.joined(separator: ", ") + "."
    }
}

/// The verdicts of `authctl doctor`, as pure functions of what authctl and the agent saw (no I/O here).
public enum Doctor {
    /// A server clock this far from ours is worth a warning; past `clockFailSeconds` ID tokens start to be refused
    /// (the agent allows 300 s of skew on `iat`/`exp`).
    public static let clockWarnSeconds = 60
    public static let clockFailSeconds = 300

    public static let startHint = "start it with `systemctl --user start auth-agent.socket` (or run `auth-agent &`)"

    /// The agent answered `ping`: its version, and whether it speaks our protocol.
    public static func agent(_ ping: PingResult, socket: String, authctlVersion: String) -> [DoctorCheck] {
        var checks = [DoctorCheck("agent", .ok, "auth-agent \(ping.agentVersion) answers on \(socket)")]
        if ping.protocolVersion != WireProtocol.version {
            checks.append(DoctorCheck("protocol", .fail,
                "the agent speaks protocol \(ping.protocolVersion), authctl speaks \(WireProtocol.version)",
                hint: "install matching versions of auth-agent and authctl, then `systemctl --user restart auth-agent`"))
        } else if ping.agentVersion != authctlVersion {
            checks.append(DoctorCheck("protocol", .warn,
                "protocol \(WireProtocol.version) on both sides, but the agent is \(ping.agentVersion) and authctl \(authctlVersion)",
                hint: "after an upgrade, restart the agent: `systemctl --user restart auth-agent`"))
        } else {
            checks.append(DoctorCheck("protocol", .ok, "protocol \(WireProtocol.version), same version as authctl"))
        }
        return checks
    }

    public static func agentNotRunning(socket: String, reason: String) -> DoctorCheck {
        DoctorCheck("agent", .fail, "auth-agent is not running (\(reason))", hint: startHint)
    }

    /// The keyring's state, and a warning for each sign-in that lives in the agent's memory only (`store`).
    public static func keyring(_ state: String, service: String? = nil, advice: String? = nil, store: String?,
                               keptInMemory: [String]) -> [DoctorCheck] {
        let memory = keptInMemory.map { account in
            DoctorCheck("store", account: account, .warn,
                        "the sign-in is kept in the agent's memory only: it ends when the agent stops",
                        hint: store == "memory"
                            ? "set `store = \"auto\"` in [agent] and run a Secret Service to keep sign-ins across restarts"
                            : "start a Secret Service (gnome-keyring-daemon, KeePassXC) in your session: the agent moves the sign-in into it")
        }
        switch (state, store) {
        case ("unused", _):
            return [DoctorCheck("keyring", .warn, "not used: store = \"memory\" keeps every sign-in in memory until the agent stops",
                                hint: advice)] + memory
        case ("absent", "auto"?):
            return [DoctorCheck("keyring", .warn, "no Secret Service is running on the agent's session bus: sign-ins are kept in memory until the agent stops",
                                hint: advice)] + memory
        default:
            return [keyring(state, service: service, advice: advice)] + memory
        }
    }

    /// `service`: the program that owns `org.freedesktop.secrets` on the agent's bus, as the agent saw it (named in
    /// the message: which program answers is up to the bus, see docs/KEEPASSXC.md); `advice`: the agent's, in its words.
    public static func keyring(_ state: String, service: String? = nil, advice: String? = nil) -> DoctorCheck {
        let owner = service.map { " (org.freedesktop.secrets: \($0))" } ?? ""
        switch state {
        case "available": return DoctorCheck("keyring", .ok, "the Secret Service is available and unlocked" + owner)
        case "locked":
            return DoctorCheck("keyring", .fail, "the Secret Service is locked, or has no collection open" + owner,
                               hint: advice.map { "\($0); tokens cannot be read or saved meanwhile" })
        case "absent":
            return DoctorCheck("keyring", .fail, "no Secret Service is running on the agent's session bus", hint: advice)
        default:
            return DoctorCheck("keyring", .warn, "the keyring did not answer in time (state: \(state))" + owner, hint: advice)
        }
    }

    /// The TPM that holds `dpop_key` keys, as the agent found it: a failure when an account has `dpop_key = "tpm"`
    /// (it cannot sign in, and its tokens cannot be used), a warning when only `auto` would use it (a software key).
    public static func tpm(_ tpm: DiagnoseResult.TPM) -> DoctorCheck {
        guard let problem = tpm.problem else { return DoctorCheck("tpm", .ok, "the TPM at \(tpm.tcti) answers") }
        let hint = problem.message.contains("usermod")
            ? "add yourself to the tss group, log in again, and restart the agent"
            : "set [agent] tpm_tcti to the TPM to use (default device:/dev/tpmrm0)"
        return DoctorCheck("tpm", tpm.required ? .fail : .warn,
                           "\(TerminalText.safe(problem.message))\(tpm.required ? "" : "; dpop_key = \"auto\" makes software keys meanwhile")",
                           hint: hint)
    }

    /// The browser program, as the agent (or, with `fromAgent` false, an agent started from this shell) would
    /// find it.
    public static func browser(program: String?, source: String?, problem: String?, fromAgent: Bool) -> DoctorCheck {
        let whose = fromAgent ? "the agent" : "an agent started from this shell"
        guard let program else {
            return DoctorCheck("browser", .warn, "\(whose) finds no browser: \(problem ?? "unknown reason")",
                               hint: "set BROWSER (in the agent's environment: `systemctl --user set-environment BROWSER=...`) or install xdg-utils; `authctl login --no-browser` works without one")
        }
        if source == "xdg-desktop-portal" {
            return DoctorCheck("browser", .ok, "\(whose) opens the browser through the xdg-desktop-portal (\(program) OpenURI)")
        }
        let via = source == "BROWSER" ? "from $BROWSER" : "xdg-open"
        return DoctorCheck("browser", .ok, "\(whose) starts \(program) (\(via))")
    }

    /// SSH and headless sessions: the browser the agent starts is not where the user is.
    public static func session(ssh: Bool, headless: Bool) -> DoctorCheck {
        if ssh {
            return DoctorCheck("session", .warn, "this is an SSH session: a browser the agent starts opens on this machine, not yours",
                               hint: "sign in with `authctl login --no-browser ACCOUNT` and paste the final URL back")
        }
        if headless {
            return DoctorCheck("session", .warn, "no DISPLAY or WAYLAND_DISPLAY: no graphical browser can open here",
                               hint: "sign in with `authctl login --no-browser ACCOUNT`, or from your desktop session")
        }
        return DoctorCheck("session", .ok, "graphical session")
    }

    /// The display the agent's browser opens on, as the agent sees it (`source`: `user manager` or `agent`); nil
    /// when the agent cannot say (the xdg-desktop-portal opens the browser). An SSH session still warns: the
    /// browser opens on this machine's display, not where the user sits.
    public static func agentDisplay(display: String?, wayland: String?, source: String?, ssh: Bool) -> DoctorCheck? {
        guard let source else { return nil }
        let whose = source == "user manager" ? "the user manager's environment" : "the agent's environment"
        if display == nil && wayland == nil {
            return DoctorCheck("display", .warn, "no DISPLAY or WAYLAND_DISPLAY in \(whose): the browser the agent starts has no screen",
                               hint: source == "user manager"
                                   ? "in your graphical session run `systemctl --user import-environment DISPLAY WAYLAND_DISPLAY XAUTHORITY`, or sign in with `authctl login --no-browser ACCOUNT`"
                                   : "start the agent from your graphical session, or sign in with `authctl login --no-browser ACCOUNT`")
        }
        let names = [wayland.map { "WAYLAND_DISPLAY=\($0)" }, display.map { "DISPLAY=\($0)" }].compactMap { $0 }
        let text = "the browser the agent starts opens on \(names.joined(separator: ", ")) (\(whose))"
        if ssh {
            return DoctorCheck("display", .warn, text + ", this machine's screen, not yours (SSH)",
                               hint: "sign in with `authctl login --no-browser ACCOUNT` and paste the final URL back")
        }
        return DoctorCheck("display", .ok, text)
    }

    /// Forwards of the agent to other hosts: `unknown` is how many requests of the last day came through a forward
    /// the agent made no session for (a bare `ssh -R` of its socket), refused as from an unknown host; `open` the
    /// hosts with an `authctl forward` session now. Nil when there is nothing to say.
    public static func forwards(unknown: Int, open: [String]) -> DoctorCheck? {
        if unknown > 0 {
            return DoctorCheck("forwards", .warn,
                               "\(unknown) request\(unknown == 1 ? "" : "s") in the last day came through a forward of the agent's socket not made by `authctl forward` (a bare `ssh -R`) and \(unknown == 1 ? "was" : "were") refused: the agent cannot tell which host asked",
                               hint: "connect with `authctl forward HOST` instead (docs/INTEGRATIONS.md, \"SSH hosts\"); only an \"ssh:unknown-host\" entry in allowed_clients serves such forwards")
        }
        guard !open.isEmpty else { return nil }
        return DoctorCheck("forwards", .ok, "forwarded to \(open.joined(separator: ", ")) (authctl forward --list)")
    }

    /// A pinned `ssh:NAME@SHA256:...` entry of an account that refused its host (by either of its names: as typed or
    /// as ssh checks its key) in `audit` because it presented another key: the entry can no longer match that host.
    /// One warning per (account, entry), naming the key presented last and the entry that re-pins it.
    public static func changedHostKeys(_ audit: [AuditEntry], allowedClients: [String: [String]]) -> [DoctorCheck] {
        var presented: [String: (account: String, host: String, pinned: String, key: String)] = [:]
        var order: [String] = []
        for entry in audit where entry.reason == "not_listed" && entry.caller.kind == WireCaller.Kind.sshHost.rawValue {
            guard let key = entry.caller.hostKey else { continue }
            let names = [entry.caller.hostAlias, entry.caller.host].compactMap { $0 }
            for rule in allowedClients[entry.account] ?? [] where rule.hasPrefix("ssh:") {
                let parts = rule.dropFirst(4).split(separator: "@", maxSplits: 1).map(String.init)
                guard parts.count == 2, names.contains(parts[0]), parts[1] != key else { continue }
                let id = entry.account + "\u{0}" + rule
                if presented[id] == nil { order.append(id) }
                presented[id] = (entry.account, parts[0], parts[1], key)
            }
        }
        return order.compactMap { presented[$0] }.map { found in
            let account = WireCaller.shown(found.account), host = WireCaller.shown(found.host)
            return DoctorCheck("host key", account: found.account, .warn,
                               "ssh:\(host) is pinned to \(WireCaller.shown(found.pinned)), but \(host) presented \(WireCaller.shown(found.key)) and was refused: its key changed, so the entry no longer serves it",
                               hint: "if you expected the change, re-pin it: \"ssh:\(host)@\(WireCaller.shown(found.key))\" in [accounts.\(account)] allowed_clients, then `authctl reload`")
        }
    }

    /// An account's `allowed_clients` entries that can match nobody (status' `never_matching`), one warning each.
    public static func neverMatching(account: String, _ reasons: [String]) -> [DoctorCheck] {
        reasons.map {
            DoctorCheck("allowed clients", account: account, .warn, WireCaller.shown($0),
                        hint: "correct the entry in [accounts.\(WireCaller.shown(account))] of config.toml, then `authctl reload`")
        }
    }

    /// The configuration file as authctl sees it: `mode` nil when it does not exist.
    public static func config(path: String, mode: UInt32?, ownedByUser: Bool) -> DoctorCheck {
        guard let mode else {
            return DoctorCheck("config", .warn, "no configuration file at \(path)",
                               hint: "add an account: `authctl accounts add NAME --preset ... --client-id ...`")
        }
        if mode & 0o022 != 0 {
            return DoctorCheck("config", .fail, "\(path) is writable by group or others; the agent refuses it",
                               hint: "run `chmod go-w \(path)`")
        }
        if !ownedByUser {
            return DoctorCheck("config", .fail, "\(path) belongs to another user; the agent refuses it")
        }
        return DoctorCheck("config", .ok, "\(path) (mode \(String(mode & 0o777, radix: 8)), yours)")
    }

    /// An account's metadata, signing keys and the server's clock, from the agent's `diagnose`.
    public static func account(_ account: DiagnoseResult.Account) -> [DoctorCheck] {
        let name = account.name
        var checks: [DoctorCheck] = []
        if let error = account.error {
            checks.append(DoctorCheck("metadata", account: name, .fail, "\(account.issuer): \(error.message)",
                                      hint: metadataHint(error.code)))
        } else if account.endpointsConfigured {
            checks.append(DoctorCheck("metadata", account: name, .ok,
                                      "endpoints from config.toml (token endpoint \(account.tokenEndpoint ?? "?"))"))
        } else {
            checks.append(DoctorCheck("metadata", account: name, .ok,
                                      "the discovery document of \(account.issuer) passes the agent's checks (token endpoint \(account.tokenEndpoint ?? "?"))"))
        }
        if let error = account.signingKeysError {
            checks.append(DoctorCheck("signing keys", account: name, .fail, error.message,
                                      hint: "ID tokens cannot be verified, so sign-in with 'openid' fails; check jwks_uri"))
        } else if let keys = account.signingKeys {
            checks.append(DoctorCheck("signing keys", account: name, keys > 0 ? .ok : .fail,
                                      "\(keys) key\(keys == 1 ? "" : "s") at \(account.jwksURI ?? "the JWKS")"))
        }
        checks.append(clock(account: name, serverTime: account.serverTime, agentTime: account.agentTime))
        return checks
    }

    public static func clock(account: String, serverTime: Int?, agentTime: Int?) -> DoctorCheck {
        guard let serverTime, let agentTime else {
            return DoctorCheck("clock", account: account, .warn, "the server sent no usable Date header; clock not compared")
        }
        let skew = agentTime - serverTime
        let text = skew == 0 ? "the same second as the server's" : "\(abs(skew)) s \(skew > 0 ? "ahead of" : "behind") the server's"
        let hint = "synchronise the clock (`timedatectl set-ntp true`); the agent allows \(clockFailSeconds) s of skew on ID tokens"
        if abs(skew) > clockFailSeconds { return DoctorCheck("clock", account: account, .fail, "this machine's clock is \(text)", hint: hint) }
        if abs(skew) > clockWarnSeconds { return DoctorCheck("clock", account: account, .warn, "this machine's clock is \(text)", hint: hint) }
        return DoctorCheck("clock", account: account, .ok, "this machine's clock is \(text)")
    }

    static func metadataHint(_ code: String) -> String {
        switch ErrorCode(rawValue: code) {
        case .serverUnreachable?: return "check the network and the issuer URL in config.toml"
        case .invalidMetadata?: return "check 'issuer' in config.toml (it must equal the document's issuer exactly), or configure the endpoints"
        case .invalidConfig?: return "set authorization_endpoint and token_endpoint, or an issuer that publishes discovery"
        case .serverError?: return "the authorization server is failing; try again later"
        default: return "see `journalctl --user -u auth-agent` for details"
        }
    }
}
