/// Text from elsewhere (an agent's or server's message, a program's path, a URL from git's input) made safe to write
/// to a terminal: every control character but newline and tab, C1 controls and DEL become a visible `\u{XX}`, so no
/// escape sequence in them can retitle the window, write the clipboard, move the cursor or hide what follows.
public enum TerminalText {
    public static func safe(_ text: String) -> String {
        guard text.unicodeScalars.contains(where: isControl) else { return text }
        var out = String.UnicodeScalarView()
        for scalar in text.unicodeScalars {
            guard isControl(scalar) else { out.append(scalar); continue }
            out.append(contentsOf: "\\u{\(String(scalar.value, radix: 16, uppercase: true))}".unicodeScalars)
        }
        return String(out)
    }

    private static func isControl(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.value {
        case 0x0A, 0x09: return false
        case 0x00...0x1F, 0x7F...0x9F: return true
        default: return false
        }
    }
}
