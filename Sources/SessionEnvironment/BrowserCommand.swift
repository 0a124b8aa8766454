import Glibc

/// Which program starts the user's browser: the first usable entry of `$BROWSER` (a colon-separated list), else
/// `xdg-open`, found on `PATH`. The agent runs it with one argument and no shell; `authctl doctor` uses the same
/// rule to say what the agent would find, so the two can never disagree.
public enum BrowserCommand {
    /// A program that was found, and where the name came from.
    public struct Found: Sendable, Equatable {
        public var path: String
        /// `BROWSER` or `xdg-open`.
        public var source: String
        public init(path: String, source: String) {
            self.path = path
            self.source = source
        }
    }

    /// Why no program was found, in one sentence.
    public static let notFoundMessage = "no browser found: set $BROWSER or install xdg-utils"

    /// The names to try, in order. Entries with spaces or `%s` expect a shell; the agent never uses one, so they are
    /// skipped (and listed in `skipped` for diagnostics).
    public static func candidates(browserVariable: String?) -> (names: [(name: String, source: String)], skipped: [String]) {
        var names: [(String, String)] = []
        var skipped: [String] = []
        if let browser = browserVariable, !browser.isEmpty {
            for entry in browser.split(separator: ":").map(String.init) {
                if entry.contains(" ") || entry.contains("%") { skipped.append(entry) } else { names.append((entry, "BROWSER")) }
            }
        }
        names.append(("xdg-open", "xdg-open"))
        return (names, skipped)
    }

    /// The program the agent would start with this environment, or nil.
    public static func resolve(environment: [String: String]) -> Found? {
        let search = environment["PATH"] ?? "/usr/local/bin:/usr/bin:/bin"
        for candidate in candidates(browserVariable: environment["BROWSER"]).names {
            if let path = which(candidate.name, path: search) { return Found(path: path, source: candidate.source) }
        }
        return nil
    }

    /// An executable named `name` on `path` (or `name` itself when it contains a slash).
    public static func which(_ name: String, path: String) -> String? {
        if name.contains("/") { return access(name, X_OK) == 0 ? name : nil }
        for directory in path.split(separator: ":") where directory.hasPrefix("/") {
            let full = "\(directory)/\(name)"
            if access(full, X_OK) == 0 { return full }
        }
        return nil
    }
}
