import AgentIPC
import AuthCLI
import FoundationEssentials
import TimeText
import Glibc

/// Human output: aligned columns and relative times.
enum Formatter {
    static func duration(_ seconds: Int) -> String {
        var s = abs(seconds)
        let days = s / 86400; s %= 86400
        let hours = s / 3600; s %= 3600
        let minutes = s / 60; s %= 60
        if days > 0 { return "\(days)d \(hours)h" }
        if hours > 0 { return "\(hours)h \(minutes)m" }
        if minutes > 0 { return "\(minutes)m \(s)s" }
        return "\(s)s"
    }

    static func relative(_ at: Int, now: Int) -> String {
        if at == now { return "just now" }
        return at > now ? "in \(duration(at - now))" : "\(duration(now - at)) ago"
    }

    /// The `sign-in:` row of `status`: when the sign-in ends, or that it ended and what to run.
    static func signInEnd(_ until: Int, ended: Bool, account: String, now: Int) -> String {
        guard !ended else {
            return "ended \(LocalTime.text(until)) (\(relative(until, now: now))): run `authctl login \(account)`"
        }
        let when = DaysLeft.phrase(DaysLeft.count(until: until, now: now)) ?? relative(until, now: now)
        return "valid until \(LocalTime.text(until)) (\(when))"
    }

    static func table(_ rows: [[String]]) -> String {
        guard let columns = rows.map(\.count).max() else { return "" }
        var widths = [Int](repeating: 0, count: columns)
        for row in rows { for (i, cell) in row.enumerated() { widths[i] = max(widths[i], cell.count) } }
        return rows.map { row in
            row.enumerated().map { i, cell in i == row.count - 1 ? cell : cell + String(repeating: " ", count: widths[i] - cell.count) }
                .joined(separator: "  ")
        }.joined(separator: "\n")
    }

    /// What `authctl login` says after a sign-in the agent keeps in memory only.
    static let keptInMemoryNotice =
        "The sign-in is kept in memory until the agent stops: start a Secret Service (gnome-keyring, KeePassXC) to keep it."

    static func status(_ status: StatusResult, now: Int, color: Bool) -> String {
        func paint(_ text: String, _ code: String) -> String { color ? "\u{1B}[\(code)m\(text)\u{1B}[0m" : text }
        let agent = status.agent
        let keyring = agent.keyring ?? "unknown"
        var lines: [String]
        let confined = ConfinedView(status)
        if let confined {
            // A host or an app is told what it is, not the desktop's socket and keyring (the agent leaves them out).
            lines = ["auth-agent \(agent.version) (protocol \(agent.protocolVersion))" + (agent.hostname.map { " on \($0)" } ?? "")
                        + ", up \(duration(agent.uptimeSeconds))"] + confined.statusLines
        } else {
            lines = [
                "auth-agent \(agent.version) (protocol \(agent.protocolVersion)), pid \(agent.pid.map(String.init) ?? "?"), up \(duration(agent.uptimeSeconds))",
                "socket:  \(agent.socket ?? "?")",
                "keyring: \(keyring == "available" ? paint(keyring, "32") : paint(keyring, keyring == "unused" ? "33" : "31"))"
                    + (agent.keyringService.map { ", \($0)" } ?? "") + (agent.keyringAdvice.map { " (\($0))" } ?? ""),
            ]
            if let by = agent.sessionLocked {
                lines.append("locked:  by \(TerminalText.safe(by)): accounts and grants that lock with the session are not served")
            }
        }
        if status.accounts.isEmpty {
            lines.append("")
            if let confined {
                lines.append("No account serves \(confined.itself) now: \(confined.noAccountsHint).")
            } else {
                lines.append("No accounts are configured. Add one to ~/.config/auth-agent/config.toml (see `authctl accounts add --help` and README, \"Configure an account\").")
            }
            return lines.joined(separator: "\n")
        }
        for account in status.accounts {
            lines.append("")
            // The agent's word, as `status --json` gives it (an agent older than `sign_in_ended`: authctl's clock).
            let ended = account.signInEnded ?? ((account.signInValidUntil ?? Int.max) <= now)
            let state: String
            switch (account.signedIn, account.loginPending) {
            case (_, true): state = paint("signing in", "33")
            case (true?, _) where ended:
                state = paint("sign-in ended", "33")
            case (true?, _) where account.keptInMemory == true: state = paint("signed in, in memory only", "33")
            case (true?, _): state = paint("signed in", "32")
            case (false?, _): state = paint("not signed in", "33")
            case (nil, _): state = paint("unknown (keyring \(keyring))", "31")
            }
            var rows = [["account:", "\(account.name) — \(state)"], ["issuer:", account.issuer],
                        ["redirect URI:", "\(account.redirectURI)  (register this at the provider)"]]
            if account.accessTokenDoesNotExpire == true {
                rows.append(["access token:", "does not expire"])
            } else if let expires = account.accessTokenExpiresAt {
                rows.append(["access token:", expires > now ? "expires \(relative(expires, now: now))" : "expired \(relative(expires, now: now))"])
            } else {
                rows.append(["access token:", "none cached"])
            }
            for scoped in account.scopedTokens ?? [] {
                let what = "scope " + (scoped.scopes?.joined(separator: " ") ?? "(granted)")
                    + (scoped.resource.map { ", resource \($0)" } ?? "")
                let when = scoped.expiresAt.map { $0 > now ? "expires \(relative($0, now: now))" : "expired \(relative($0, now: now))" }
                    ?? "does not expire"
                rows.append(["scoped token:", "\(what): \(when)"])
            }
            if let until = account.signInValidUntil, account.signedIn != false {
                rows.append(["sign-in:", signInEnd(until, ended: ended, account: account.name, now: now)])
            }
            if account.keptInMemory == true {
                if let error = account.keyringMoveError {
                    rows.append(["kept:", "in the agent's memory until the keyring takes it (lost if the agent stops first)"])
                    rows.append(["keyring:", paint("not written yet: \(error)", "31")])
                } else {
                    rows.append(["kept:", "in the agent's memory until it stops (no Secret Service to keep it)"])
                }
            }
            let key = account.dpopKey == "tpm" ? "the TPM's key" : "the agent's key"
            switch account.dpop {
            case "access_token"?: rows.append(["DPoP:", "tokens bound to \(key) (use `authctl token --header --url URL`)"])
            case "refresh_token"?: rows.append(["DPoP:", "the refresh token is bound to \(key); access tokens are Bearer"])
            case "refused"?: rows.append(["DPoP:", paint("the server refused it for this client; signed in without it", "33")])
            default: break
            }
            switch account.dpopKey {
            case "tpm"?: rows.append(["DPoP key:", "held by the TPM (the keyring item cannot be used on another machine)"])
            case "software"?: rows.append(["DPoP key:", "in the keyring item"])
            default: break
            }
            if let refreshed = account.lastRefresh { rows.append(["last refresh:", relative(refreshed, now: now)]) }
            if let access = account.access { rows.append(["tokens for:", access.summary]) }
            if let error = account.lastError {
                rows.append(["last error:", paint("\(error.code): \(TerminalText.safe(error.message)) (\(relative(error.at, now: now)))", "31")])
            }
            lines.append(table(rows))
        }
        if let forwards = status.forwards, !forwards.isEmpty {
            lines.append("")
            lines.append(table(forwards.map { forward in
                ["forwarded to:", "\(forward.alias.map { "\($0) (\(forward.host))" } ?? forward.host), host key \(forward.hostKey ?? "not reported yet"), since \(relative(forward.since, now: now))"
                    + (forward.sshPID.map { " (ssh pid \($0))" } ?? "")]
            }))
        }
        if let grants = status.grants, !grants.isEmpty {
            lines.append("")
            lines.append(table(grants.map { grant in
                ["grant \(grant.name):", "\(grant.accounts.joined(separator: ", ")), \(GrantCommand.lasts(grant, now: now)), used \(grant.uses) time\(grant.uses == 1 ? "" : "s")"
                    + (grant.lastUse.map { " (last \(relative($0, now: now)))" } ?? "") + "; mount \(grant.directory)"]
            }))
        }
        return lines.joined(separator: "\n")
    }
}

enum Terminal {
    /// Colour only on a terminal, and never with NO_COLOR (https://no-color.org).
    static var wantsColor: Bool {
        isatty(STDOUT_FILENO) == 1 && (ProcessInfo.processInfo.environment["NO_COLOR"] ?? "").isEmpty
            && ProcessInfo.processInfo.environment["TERM"] != "dumb"
    }

    /// Manual paste (`login --no-browser`): the URL to open elsewhere and what to paste back.
    static func announcePaste(_ event: WireEvent, account: String) {
        guard event.type == WireEvent.loginStarted, let url = event.url else { return }
        var text = "To sign in to '\(account)', open this URL in a browser (on this or another machine):\n"
        text += "\n  \(url)\n\n"
        text += "After signing in, the browser is sent to \(event.redirectURI ?? "the redirect URI") (the page may not load there).\n"
        text += "Copy that full address from the address bar, paste it here and press Enter "
        text += "(gives up after \(Formatter.duration(event.timeoutSeconds ?? 300)); Ctrl-C cancels):\n"
        writeStderr(text)
    }

    /// Progress of a sign-in, on stderr so stdout stays clean for tokens and JSON.
    static func announce(_ event: WireEvent, account: String) {
        if event.type == WireEvent.consentRequired {
            // A host or an app cannot answer for itself: the answer comes from where the agent runs.
            let client = event.client ?? "this program"
            let where_ = client.hasPrefix("ssh:") ? " on the computer where the agent runs (not here)"
                : client.hasPrefix("flatpak:") ? " outside the sandbox" : ""
            // A host allowed before under another key: its key changed since (or someone else answers as it).
            let changed = event.previousHostKey.map { " (its host key changed: it was allowed before with host key \(WireCaller.shown($0)))" } ?? ""
            return writeStderr("Waiting for your permission to give '\(account)' tokens to \(client)\(changed): "
                + "run `authctl approve \(event.request ?? 0)` (or `authctl deny \(event.request ?? 0)`) in a terminal\(where_), or answer the "
                + "notification (gives up after \(Formatter.duration(event.timeoutSeconds ?? 60))).\n")
        }
        guard event.type == WireEvent.loginStarted, let url = event.url else { return }
        var text = ""
        if event.browserOpened == true {
            text += "Opened your browser to sign in to '\(account)'. If it did not open, visit:\n"
        } else {
            text += "Could not open a browser\(event.browserError.map { " (\($0))" } ?? ""). To sign in to '\(account)', visit:\n"
        }
        text += "\n  \(url)\n\n"
        text += "Waiting for the sign-in to finish (gives up after \(Formatter.duration(event.timeoutSeconds ?? 300)); Ctrl-C cancels)...\n"
        writeStderr(text)
    }
}

extension Formatter {
    /// `authctl doctor`: one aligned line per check, its hint indented below, then a summary.
    static func doctor(_ report: DoctorReport, color: Bool) -> String {
        func paint(_ status: DoctorCheck.Status) -> String {
            let word = status.rawValue + String(repeating: " ", count: max(0, 4 - status.rawValue.count))
            guard color else { return word }
            let code = switch status { case .ok: "32"; case .warn: "33"; case .fail: "31"; case .skip: "2" }
            return "\u{1B}[\(code)m\(word)\u{1B}[0m"
        }
        let width = report.checks.map { label($0).count }.max() ?? 0
        var lines: [String] = []
        for check in report.checks {
            let name = label(check)
            lines.append("\(paint(check.status))  \(name)\(String(repeating: " ", count: width - name.count))  \(TerminalText.safe(check.message))")
            if let hint = check.hint, check.status != .ok {
                lines.append("      \(String(repeating: " ", count: width))  hint: \(TerminalText.safe(hint))")
            }
        }
        lines.append("")
        lines.append(report.summary)
        return lines.joined(separator: "\n")
    }

    private static func label(_ check: DoctorCheck) -> String {
        check.account.map { "\($0): \(check.check)" } ?? check.check
    }
}
