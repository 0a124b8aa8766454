/// The `.desktop` entry that makes the desktop hand a private-use redirect URI (RFC 8252 §7.1) to
/// `authctl callback URI`: `MimeType=x-scheme-handler/<scheme>;` and `Exec=<authctl> callback %u`. Pure text, so it
/// is tested without a desktop; `authctl register-scheme` writes it and runs `xdg-mime`.
public enum SchemeHandler {
    /// The scheme of a private-use redirect URI (`com.example.app:/path`: a period in the scheme, one slash, not
    /// http(s)), or nil for anything else (a loopback redirect URI, say).
    public static func privateUseScheme(of redirectURI: String) -> String? {
        guard let colon = redirectURI.firstIndex(of: ":") else { return nil }
        let scheme = String(redirectURI[..<colon])
        let rest = redirectURI[redirectURI.index(after: colon)...]
        guard scheme.contains("."), scheme != "http", scheme != "https", rest.hasPrefix("/"), !rest.hasPrefix("//"),
              scheme.unicodeScalars.allSatisfy({ ("a"..."z").contains($0) || ("0"..."9").contains($0) || $0 == "." || $0 == "-" })
        else { return nil }
        return scheme
    }

    /// `auth-agent-<scheme>.desktop`: one file per scheme, named so a person sees whose it is.
    public static func desktopFileName(scheme: String) -> String { "auth-agent-\(scheme).desktop" }

    public static func mimeType(scheme: String) -> String { "x-scheme-handler/\(scheme)" }

    /// The desktop entry. `NoDisplay` keeps it out of menus; `authctl` is named by its absolute path.
    public static func desktopEntry(scheme: String, authctlPath: String) -> String {
        """
        [Desktop Entry]
        Type=Application
        Name=auth-agent sign-in (\(scheme))
        Comment=Hands OAuth sign-in responses for \(scheme): to auth-agent
        Exec=\(execArgument(authctlPath)) callback %u
        MimeType=\(mimeType(scheme: scheme));
        NoDisplay=true
        Terminal=false

        """
    }

    /// Quotes a program path for `Exec=` (Desktop Entry Specification, "The Exec key"): plain when it needs nothing,
    /// else in double quotes with `"`, `` ` ``, `$` and `\` escaped; `%` is doubled either way. The key's value is
    /// itself a string, so each backslash is written twice.
    public static func execArgument(_ path: String) -> String {
        let doubled = path.replacingAll("%", with: "%%")
        let plain = doubled.unicodeScalars.allSatisfy {
            ("a"..."z").contains($0) || ("A"..."Z").contains($0) || ("0"..."9").contains($0) || "/._+-%".unicodeScalars.contains($0)
        }
        if plain { return doubled }
        var quoted = ""
        for character in doubled {
            switch character {
            case "\"", "`", "$": quoted += "\\\\" + String(character)
            case "\\": quoted += "\\\\\\\\"
            default: quoted.append(character)
            }
        }
        return "\"\(quoted)\""
    }
}

extension String {
    /// `replacingOccurrences` without Foundation (AuthCLI uses the standard library only).
    func replacingAll(_ target: Character, with replacement: String) -> String {
        var result = ""
        for character in self {
            if character == target { result += replacement } else { result.append(character) }
        }
        return result
    }
}
