import AgentIPC

/// `authctl audit` and `authctl pending`'s text: pure, so the tests pin it down.
public enum AuditFormat {
    /// Who, in one cell: the Flatpak app or executable, the relay that carried its request (`via dash via authctl`),
    /// the unit, the pid and front end.
    public static func who(_ caller: WireCaller) -> String {
        // A forwarded host: the host and its key say who; the local ssh that carried it is only the pid.
        if caller.via.hasPrefix("ssh:") {
            return caller.via + (caller.hostKey.map { " (host key \($0))" } ?? "")
                + (caller.remoteProgram.map { ", running \($0) (said by the host)" } ?? "") + " ssh pid \(caller.pid)"
        }
        var parts: [String] = []
        if let app = caller.flatpakApp { parts.append("flatpak:\(app)") }
        if let instance = caller.flatpakInstance { parts.append("(instance \(instance))") }
        if let why = caller.instanceMismatch { parts.append("(not that instance: \(why))") }
        if let holes = caller.notContained { parts.append("(not contained: \(holes.joined(separator: ", ")))") }
        if let exe = caller.exe { parts.append(caller.exeDeleted == true ? "\(exe) (deleted)" : exe) } else { parts.append("?") }
        if caller.unnamedSandbox == true { parts.append("(sandbox naming no app)") }
        if caller.ownPIDNamespace == true { parts.append("(own pid namespace)") }
        // As the agent's own messages put it (AuthCore's ClientIdentity.via; authctl does not link AuthCore).
        if let relays = caller.relayedBy {
            parts.append(relays.map { "via \($0.split(separator: "/").last.map(String.init) ?? $0)" }.joined(separator: " "))
        }
        if let unit = caller.unit { parts.append("unit:\(unit)") }
        parts.append("pid \(caller.pid)" + (caller.via == "socket" ? "" : " via \(caller.via)"))
        return parts.joined(separator: " ")
    }

    /// One table row per record: time (UTC), account, outcome (reason), what was asked for, who.
    public static func row(_ entry: AuditEntry) -> [String] {
        var what: [String] = []
        if let scopes = entry.scopes { what.append("scopes=\(scopes.joined(separator: ","))") }
        if let resource = entry.resource { what.append("resource=\(resource)") }
        if let proofFor = entry.proofFor { what.append("dpop=\(proofFor.split(separator: " ", maxSplits: 1).joined(separator: ":"))") }
        // Shortened by the agent to fit a reply page (docs/PROTOCOL.md, `audit`); the journal has it whole.
        if entry.clipped == true { what.append("(clipped)") }
        return [RFC3339.utc(unixSeconds: entry.time), entry.account, "\(entry.outcome) (\(entry.reason))",
                what.isEmpty ? "-" : what.joined(separator: " "), who(entry.caller)]
    }

    public static let header = ["TIME", "ACCOUNT", "OUTCOME", "ASKED", "CALLER"]
}
