import ConfigFile

/// Writes and removes `[accounts.NAME]` sections of config.toml as text, keeping everything else (other sections,
/// comments, blank lines) exactly as it was. Whether the result is a valid configuration is decided by the agent's
/// own loader (`auth-agent --check-config`), not here.
public enum ConfigSection {
    /// The comment written above each added section; `remove` takes it away with the section.
    public static let marker = "# added by `authctl accounts add`"

    /// The section for `name`: the preset's values, the client, and the scopes (`scopes` replaces the preset's).
    public static func render(name: String, preset: ProviderPreset, clientID: String, clientSecret: String?,
                              scopes: [String]? = nil, gitHosts: [String] = []) -> String {
        var lines = ["\(marker) --preset \(preset.name)", "[accounts.\(key(name))]"]
        func add(_ key: String, _ value: String?) {
            if let value { lines.append("\(key) = \(quote(value))") }
        }
        add("issuer", preset.issuer)
        add("client_id", clientID)
        add("client_secret", clientSecret)
        lines.append("scopes = [\((scopes ?? preset.scopes).map(quote).joined(separator: ", "))]")
        add("authorization_endpoint", preset.authorizationEndpoint)
        add("token_endpoint", preset.tokenEndpoint)
        add("jwks_uri", preset.jwksURI)
        add("device_authorization_endpoint", preset.deviceAuthorizationEndpoint)
        if !preset.extraAuthParams.isEmpty {
            lines.append("extra_auth_params = { \(preset.extraAuthParams.map { "\($0.0) = \(quote($0.1))" }.joined(separator: ", ")) }")
        }
        if let lifetime = preset.signInLifetime {
            add("sign_in_lifetime", lifetime.period)
            add("sign_in_lifetime_kind", lifetime.kind)
        }
        if !gitHosts.isEmpty { lines.append("git_hosts = [\(gitHosts.map(quote).joined(separator: ", "))]") }
        return lines.joined(separator: "\n") + "\n"
    }

    /// `text` with `section` appended after one blank line.
    public static func appending(_ section: String, to text: String) -> String {
        if text.isEmpty { return section }
        var base = text
        if !base.hasSuffix("\n") { base += "\n" }
        if !base.hasSuffix("\n\n") { base += "\n" }
        return base + section
    }

    /// Whether a table of account `name` exists: `[accounts.NAME]` (quoted or not), or a sub-table of it
    /// (`[accounts.NAME.x]`, `[[accounts.NAME.x]]`) anywhere in the file.
    public static func defines(_ name: String, in text: String) -> Bool {
        TOMLHeader.lines(lines(text).all).contains { belongs($0, to: name) }
    }

    /// `text` without account `name`'s tables: its section with the marker comment above it, and every sub-table
    /// of it, wherever TOML let it be written (after other sections too). Comments directly above the next table
    /// stay with that table; everything else is kept byte for byte. nil when the account has no table.
    public static func removing(_ name: String, from text: String) -> String? {
        let (all, terminated) = lines(text)
        let kinds = TOMLHeader.lines(all)
        let headers = kinds.indices.filter { if case .header = kinds[$0] { true } else { false } }
        var removed = [Bool](repeating: false, count: all.count)
        for (number, start) in headers.enumerated() where belongs(kinds[start], to: name) {
            let end = number + 1 < headers.count ? headers[number + 1] : all.count
            // Up to the table's last key line and the blank lines after it: a comment block that follows introduces
            // what comes next (or closes the file), so it stays.
            var stop = start + 1
            for index in (start + 1)..<end where kinds[index] == .continuation || !isBlankOrComment(all[index]) {
                stop = index + 1
            }
            while stop < end, all[stop].allSatisfy(\.isWhitespace) { stop += 1 }
            var first = start
            if kinds[start] == .header(["accounts", name], isArray: false), first > 0, kinds[first - 1] == .other,
               all[first - 1].hasPrefix(marker) {
                first -= 1
            }
            for index in first..<stop { removed[index] = true }
        }
        guard removed.contains(true) else { return nil }
        var kept = all.indices.filter { !removed[$0] }.map { all[$0] }
        guard removed.last == true else { return kept.joined(separator: "\n") + (terminated ? "\n" : "") }
        // The file ended with a removed table: the blank lines that stood before it go too.
        while let last = kept.last, last.allSatisfy(\.isWhitespace) { kept.removeLast() }
        return kept.isEmpty ? "" : kept.joined(separator: "\n") + "\n"
    }

    /// A TOML basic string.
    public static func quote(_ value: String) -> String {
        var out = "\""
        for scalar in value.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\t": out += "\\t"
            case "\r": out += "\\r"
            default:
                if scalar.value < 0x20 || scalar.value == 0x7F {
                    let hex = String(scalar.value, radix: 16, uppercase: true)
                    out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
                } else {
                    out.unicodeScalars.append(scalar)
                }
            }
        }
        return out + "\""
    }

    // MARK: Lines

    /// The lines of `text`, split at each `\n` (as unicode scalars: a CRLF line keeps its `\r`), and whether the
    /// last one ended with a newline.
    private static func lines(_ text: String) -> (all: [Substring], terminated: Bool) {
        var all = text.unicodeScalars.split(separator: "\n", omittingEmptySubsequences: false).map(Substring.init)
        guard all.last == "" else { return (all, false) }
        all.removeLast()
        return (all, true)
    }

    private static func isBlankOrComment(_ line: Substring) -> Bool {
        let trimmed = line.drop(while: \.isWhitespace)
        return trimmed.isEmpty || trimmed.hasPrefix("#")
    }

    /// Whether the line is a header of a table of account `name` (``TOMLHeader``, which the agent's error locator
    /// reads with too).
    private static func belongs(_ line: TOMLHeader.Line, to name: String) -> Bool {
        guard case .header(let parts, _) = line, parts.count >= 2 else { return false }
        return parts[0] == "accounts" && parts[1] == name
    }

    /// A table key: bare when TOML allows it, else quoted.
    public static func key(_ name: String) -> String {
        let bare = !name.isEmpty && name.unicodeScalars.allSatisfy {
            ("a"..."z").contains($0) || ("A"..."Z").contains($0) || ("0"..."9").contains($0) || $0 == "-" || $0 == "_"
        }
        return bare ? name : quote(name)
    }
}
