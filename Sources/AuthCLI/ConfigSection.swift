import TOMLConfig

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

    /// Whether a table header for account `name` (`[accounts.NAME]`, quoted or not, or a sub-table of it) exists.
    public static func defines(_ name: String, in text: String) -> Bool {
        lines(text).contains { belongs(header(of: $0), to: name) }
    }

    /// `text` without account `name`'s section (and its sub-tables, and the marker comment above it). Comments
    /// directly above the next section stay with that section. nil when there is no such section.
    public static func removing(_ name: String, from text: String) -> String? {
        let all = lines(text)
        guard let start = all.firstIndex(where: { header(of: $0).map { $0 == ["accounts", name] } ?? false }) else { return nil }
        var end = start + 1
        while end < all.count {
            if let next = header(of: all[end]), !belongs(next, to: name) { break }
            end += 1
        }
        // Up to our last key line and the blank lines after it: a comment block that follows introduces what comes
        // next (or closes the file), so it stays.
        var stop = start + 1
        for index in (start + 1)..<end where !isBlankOrComment(all[index]) { stop = index + 1 }
        while stop < end, all[stop].allSatisfy(\.isWhitespace) { stop += 1 }
        end = stop
        var first = start
        if first > 0, all[first - 1].hasPrefix(marker) { first -= 1 }
        var kept = Array(all[..<first]) + Array(all[end...])
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

    private static func lines(_ text: String) -> [Substring] {
        var all = text.split(separator: "\n", omittingEmptySubsequences: false)
        if all.last == "" { all.removeLast() }
        return all
    }

    private static func isBlankOrComment(_ line: Substring) -> Bool {
        let trimmed = line.drop(while: \.isWhitespace)
        return trimmed.isEmpty || trimmed.hasPrefix("#")
    }

    private static func belongs(_ header: [String]?, to name: String) -> Bool {
        guard let header, header.count >= 2 else { return false }
        return header[0] == "accounts" && header[1] == name
    }

    /// The dotted parts of a `[table]` header (``TOMLHeader``, which the agent's error locator reads with too).
    static func header(of line: Substring) -> [String]? { TOMLHeader.parts(of: line) }

    /// A table key: bare when TOML allows it, else quoted.
    public static func key(_ name: String) -> String {
        let bare = !name.isEmpty && name.unicodeScalars.allSatisfy {
            ("a"..."z").contains($0) || ("A"..."Z").contains($0) || ("0"..."9").contains($0) || $0 == "-" || $0 == "_"
        }
        return bare ? name : quote(name)
    }
}
