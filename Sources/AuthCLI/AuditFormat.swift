import AgentIPC

/// `authctl audit` and `authctl pending`'s text: pure, so the tests pin it down.
public enum AuditFormat {
    /// Who, in one cell: the caller as the agent describes it (``WireCaller/described(withPID:)``), with its pid.
    public static func who(_ caller: WireCaller) -> String { caller.described(withPID: true) }

    /// One table row per record: time (UTC), account, outcome (reason), what was asked for, who.
    public static func row(_ entry: AuditEntry) -> [String] {
        var what: [String] = []
        if let scopes = entry.scopes { what.append("scopes=\(WireCaller.shown(scopes.joined(separator: ",")))") }
        if let resource = entry.resource { what.append("resource=\(WireCaller.shown(resource))") }
        if let proofFor = entry.proofFor { what.append("dpop=\(WireCaller.shown(proofFor.split(separator: " ", maxSplits: 1).joined(separator: ":")))") }
        // Shortened by the agent to fit a reply page (docs/PROTOCOL.md, `audit`); the journal has it whole.
        if entry.clipped == true { what.append("(clipped)") }
        return [RFC3339.utc(unixSeconds: entry.time), WireCaller.shown(entry.account), "\(entry.outcome) (\(entry.reason))",
                what.isEmpty ? "-" : what.joined(separator: " "), who(entry.caller)]
    }

    public static let header = ["TIME", "ACCOUNT", "OUTCOME", "ASKED", "CALLER"]
}
