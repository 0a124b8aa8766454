/// Which account answers a git credential request when `authctl git-credential` runs without `--account`: each
/// account's `git_hosts` entries (config.toml) are `HOST[:PORT]` or `HOST[:PORT]/PATH-PREFIX`. An entry with a path
/// prefix matches only when git sends the path (`credential.useHttpPath`), on whole path segments. The most specific
/// match wins; two accounts matching equally well is an error, never a guess.
public enum GitHostMap {
    public enum Outcome: Sendable, Equatable {
        case account(String)
        case none
        case ambiguous([String])
    }

    public static func account(for request: GitCredentialRequest, entries: [(account: String, pattern: String)]) -> Outcome {
        guard let host = request.host?.lowercased(), !host.isEmpty else { return .none }
        let path = trimSlashes(request.path ?? "")
        var best = -1
        var winners: [String] = []
        for entry in entries {
            let (patternHost, patternPath) = split(entry.pattern)
            guard patternHost == host else { continue }
            if !patternPath.isEmpty {
                guard path == patternPath || path.hasPrefix(patternPath + "/") else { continue }
            }
            let score = patternPath.count
            if score > best {
                best = score
                winners = [entry.account]
            } else if score == best, !winners.contains(entry.account) {
                winners.append(entry.account)
            }
        }
        switch winners.count {
        case 0: return .none
        case 1: return .account(winners[0])
        default: return .ambiguous(winners)
        }
    }

    /// `HOST[:PORT]` (lowercased) and the path prefix without slashes at either end.
    static func split(_ pattern: String) -> (host: String, path: String) {
        guard let slash = pattern.firstIndex(of: "/") else { return (pattern.lowercased(), "") }
        return (String(pattern[..<slash]).lowercased(), trimSlashes(String(pattern[slash...])))
    }

    static func trimSlashes(_ text: String) -> String {
        var part = Substring(text)
        while part.first == "/" { part.removeFirst() }
        while part.last == "/" { part.removeLast() }
        return String(part)
    }
}
