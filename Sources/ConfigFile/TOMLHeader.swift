/// The one reading of a config.toml table header, shared by the agent (to point its errors at a line) and authctl
/// (which edits `[accounts.NAME]` sections as text): `[a."b.c".'d']` is `["a", "b.c", "d"]`.
public enum TOMLHeader {
    /// What a line of a TOML file is, as far as finding its tables goes (``lines(_:)``).
    public enum Line: Equatable, Sendable {
        /// A table header, `[a.b]`, or with `isArray` an array-of-tables header, `[[a.b]]`.
        case header([String], isArray: Bool)
        /// A line that starts outside any value: a key, a comment or a blank line.
        case other
        /// A line inside a value begun on an earlier line (a multi-line string or array): never a header or a
        /// comment, whatever it looks like.
        case continuation
    }

    /// The dotted parts of a `[table]` header (quotes, basic or literal, removed; dots and spaces inside quotes
    /// kept; spaces around parts dropped), or nil for any other line (array-of-tables headers included).
    public static func parts(of line: Substring) -> [String]? {
        guard let header = header(of: line), !header.isArray else { return nil }
        return header.parts
    }

    /// The dotted parts of a `[table]` or `[[array.of.tables]]` header, read as ``parts(of:)`` reads them, or nil.
    /// The line alone says nothing of whether it is inside a multi-line value: ``lines(_:)`` does.
    public static func header(of line: Substring) -> (parts: [String], isArray: Bool)? {
        let trimmed = line.drop(while: \.isWhitespace)
        guard trimmed.hasPrefix("[") else { return nil }
        let isArray = trimmed.hasPrefix("[[")
        var parts: [String] = []
        var current = ""
        var quote: Character?
        var rest = trimmed.dropFirst(isArray ? 2 : 1)
        while let character = rest.popFirst() {
            if let open = quote {
                if character == open { quote = nil } else { current.append(character) }
            } else if character == "\"" || character == "'" {
                quote = character
            } else if character == "." {
                parts.append(current)
                current = ""
            } else if character == "]" {
                guard !isArray || rest.first == "]" else { return nil }
                parts.append(current)
                return (parts, isArray)
            } else if !character.isWhitespace {
                current.append(character)
            }
        }
        return nil
    }

    /// What each of a file's lines (split at `\n`, without it) is: a header is recognised only where a statement
    /// can start, so a line of a multi-line string or array that looks like `[agent]` or `# note` is a
    /// ``Line/continuation``, as the TOML parser reads it.
    public static func lines(_ lines: [Substring]) -> [Line] {
        var scanner = ValueScanner()
        return lines.map { line in
            if scanner.isInsideValue {
                scanner.scan(line.unicodeScalars)
                return .continuation
            }
            if let header = header(of: line) { return .header(header.parts, isArray: header.isArray) }
            scanner.scan(line.unicodeScalars)
            return .other
        }
    }

    /// Follows a key line's value across lines: whether the next line is still inside a multi-line string or an
    /// array (or inline table) left open. Comments and single-line strings are skipped, so brackets and quotes in
    /// them count for nothing.
    struct ValueScanner {
        enum Mode { case none, basic, literal }
        var mode = Mode.none
        var depth = 0

        var isInsideValue: Bool { mode != .none || depth > 0 }

        mutating func scan(_ line: Substring.UnicodeScalarView) {
            let scalars = Array(line)
            var index = 0
            func opens(_ quote: Unicode.Scalar) -> Bool {
                index + 2 < scalars.count && scalars[index] == quote && scalars[index + 1] == quote
                    && scalars[index + 2] == quote
            }
            while index < scalars.count {
                let scalar = scalars[index]
                switch mode {
                case .basic where scalar == "\\":
                    index += 2
                case .basic where opens("\""), .literal where opens("'"):
                    // Up to two quotes more before the closing three are the string's own.
                    var count = 0
                    while index < scalars.count, scalars[index] == scalar, count < 5 {
                        index += 1
                        count += 1
                    }
                    mode = .none
                case .basic, .literal:
                    index += 1
                case .none:
                    switch scalar {
                    case "#":
                        return
                    case "\"" where opens("\""):
                        mode = .basic
                        index += 3
                    case "'" where opens("'"):
                        mode = .literal
                        index += 3
                    case "\"", "'":
                        // A single-line string: to its closing quote (escapes only in basic strings).
                        index += 1
                        while index < scalars.count, scalars[index] != scalar {
                            index += scalar == "\"" && scalars[index] == "\\" ? 2 : 1
                        }
                        index += 1
                    case "[", "{":
                        depth += 1
                        index += 1
                    case "]", "}":
                        depth = max(0, depth - 1)
                        index += 1
                    default:
                        index += 1
                    }
                }
            }
        }
    }
}
