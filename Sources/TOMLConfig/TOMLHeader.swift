/// The one reading of a config.toml table header, shared by the agent (to point its errors at a line) and authctl
/// (which edits `[accounts.NAME]` sections as text): `[a."b.c".'d']` is `["a", "b.c", "d"]`.
public enum TOMLHeader {
    /// The dotted parts of a `[table]` header (quotes, basic or literal, removed; dots and spaces inside quotes
    /// kept; spaces around parts dropped), or nil for any other line (array-of-tables headers included).
    public static func parts(of line: Substring) -> [String]? {
        let trimmed = line.drop(while: \.isWhitespace)
        guard trimmed.hasPrefix("["), !trimmed.hasPrefix("[[") else { return nil }
        var parts: [String] = []
        var current = ""
        var quote: Character?
        for character in trimmed.dropFirst() {
            if let open = quote {
                if character == open { quote = nil } else { current.append(character) }
            } else if character == "\"" || character == "'" {
                quote = character
            } else if character == "." {
                parts.append(current)
                current = ""
            } else if character == "]" {
                parts.append(current)
                return parts
            } else if !character.isWhitespace {
                current.append(character)
            }
        }
        return nil
    }
}
