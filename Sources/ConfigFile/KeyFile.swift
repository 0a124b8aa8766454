/// The one reading of a GLib key file (the format of a Flatpak sandbox's `/.flatpak-info`), shared by the agent
/// (which judges a caller by it) and authctl (which names a sandbox's missing permission from it). Reads as GLib's
/// `GKeyFile` does: `[Group]` headers, `key=value` entries with blanks around the key and before the value dropped,
/// `#` comments and blank lines skipped, string lists split at unescaped `;`. Pure: it takes the file's text.
public enum KeyFile {
    /// A line that says something.
    public enum Line: Equatable, Sendable {
        /// `[NAME]`: the entries that follow are NAME's.
        case group(String)
        /// `KEY=VALUE` in the group last named.
        case entry(key: String, value: String)
    }

    /// The groups and entries of `text`, in the file's order. `complete` false: `text` is only the file's first bytes,
    /// so its last line may be cut in the middle and is left out. A line without `=` is skipped; an unclosed `[`
    /// header is a group named by the whole line, which no reader asks for.
    public static func lines(_ text: String, complete: Bool = true) -> [Line] {
        // "\r\n" is one Character in Swift: a line ends at either.
        var raw = text.split(omittingEmptySubsequences: false, whereSeparator: { $0 == "\n" || $0 == "\r\n" })
        if !complete, !raw.isEmpty { raw.removeLast() }
        var lines: [Line] = []
        for line in raw {
            let trimmed = blanksTrimmed(line)
            if trimmed.isEmpty || trimmed.hasPrefix("#") { continue }
            if trimmed.hasPrefix("[") {
                // An unclosed header (GLib refuses the file) still ends the group before it: its entries are nobody's.
                lines.append(.group(trimmed.hasSuffix("]") && trimmed.count >= 2 ? String(trimmed.dropFirst().dropLast()) : trimmed))
                continue
            }
            guard let equals = trimmed.firstIndex(of: "=") else { continue }
            lines.append(.entry(key: blanksTrimmed(trimmed[..<equals]), value: blanksTrimmed(trimmed[trimmed.index(after: equals)...])))
        }
        return lines
    }

    /// A string list value (`a;b;c;`), split at unescaped `;` (GLib escapes a `;` in an element as `\;`, which is kept
    /// as written); empty elements dropped.
    public static func list(_ value: String) -> [String] {
        var elements: [String] = [], current = "", escaped = false
        for character in value {
            if escaped {
                current.append(character)
                escaped = false
            } else if character == "\\" {
                current.append(character)
                escaped = true
            } else if character == ";" {
                elements.append(current)
                current = ""
            } else {
                current.append(character)
            }
        }
        if !current.isEmpty { elements.append(current) }
        return elements.filter { !$0.isEmpty }
    }

    /// Without leading and trailing ASCII blanks (GLib's `g_ascii_isspace`: space, tab, CR, vertical tab, form feed).
    private static func blanksTrimmed(_ text: Substring) -> String {
        let blank: (Character) -> Bool = { $0 == " " || $0 == "\t" || $0 == "\r" || $0 == "\u{0B}" || $0 == "\u{0C}" }
        guard let start = text.firstIndex(where: { !blank($0) }), let end = text.lastIndex(where: { !blank($0) }) else { return "" }
        return String(text[start...end])
    }
}
