import Glibc

/// Where the agent's socket is: `$AUTH_AGENT_SOCKET`, else `$XDG_RUNTIME_DIR/auth-agent/agent.sock`.
/// Shared by agent and CLI so they can never disagree.
public enum SocketPath {
    public static let directoryName = "auth-agent"
    public static let fileName = "agent.sock"

    public static func resolve(environment: [String: String]) -> String? {
        resolve { environment[$0] }
    }

    /// The same, reading each variable through `variable` (authctl passes getenv: a `[String: String]` costs its
    /// start-up a scan of every protocol conformance in the binary, docs/BENCHMARKS.md "`authctl token`").
    public static func resolve(variable: (String) -> String?) -> String? {
        if let explicit = variable("AUTH_AGENT_SOCKET"), !explicit.isEmpty { return explicit }
        guard let runtime = variable("XDG_RUNTIME_DIR"), !runtime.isEmpty else { return nil }
        return defaultPath(runtimeDirectory: runtime)
    }

    /// The longest path a Unix socket address holds, in bytes (`sun_path` less its terminating NUL).
    public static let maxAddressBytes = MemoryLayout.size(ofValue: sockaddr_un().sun_path) - 1

    /// The address of the socket at `path` (the agent binds it, clients connect to it), or nil when the path is
    /// longer than ``maxAddressBytes``.
    public static func address(_ path: String) -> sockaddr_un? {
        let bytes = Array(path.utf8)
        guard bytes.count <= maxAddressBytes else { return nil }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: bytes)
            raw[bytes.count] = 0
        }
        return address
    }

    /// A grant's name as the agent takes it: letters, digits, `-`, `_` and `.`, at most 32, not starting with `-`
    /// or `.` (it names a directory), and not the name of the grants' state file beside those directories
    /// (`grants.json`, and its `.new` while it is written).
    public static func isGrantName(_ name: String) -> Bool {
        !name.isEmpty && name.utf8.count <= 32 && !name.hasPrefix("-") && !name.hasPrefix(".")
            && !name.hasPrefix("grants.json") && name.unicodeScalars.allSatisfy {
            ("a"..."z").contains($0) || ("A"..."Z").contains($0) || ("0"..."9").contains($0) || $0 == "-" || $0 == "_" || $0 == "."
        }
    }

    public static func defaultPath(runtimeDirectory: String) -> String {
        let base = runtimeDirectory.hasSuffix("/") ? String(runtimeDirectory.dropLast()) : runtimeDirectory
        return "\(base)/\(directoryName)/\(fileName)"
    }
}
