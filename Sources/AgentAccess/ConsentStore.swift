import Glibc
import FoundationEssentials

/// The user's remembered Allow/Deny decisions, per (account, client), in a JSON file (by default
/// `$XDG_STATE_HOME/auth-agent/consent.json`): mode 0600 in a 0700 directory, replaced atomically (write a temporary
/// file, fsync, rename), no secrets in it. A missing file is "no decisions"; an unreadable or corrupt one too (the
/// agent then asks again, which fails safe) with a warning from the caller.
public struct ConsentStore: Sendable {
    /// One remembered decision.
    public struct Decision: Codable, Sendable, Equatable {
        public var account: String
        /// An executable path or `flatpak:APP` (``AuthCore/ClientIdentity/consentKey``).
        public var client: String
        public var allowed: Bool
        /// Unix time of the decision.
        public var time: Int

        public init(account: String, client: String, allowed: Bool, time: Int) {
            self.account = account
            self.client = client
            self.allowed = allowed
            self.time = time
        }
    }

    struct File: Codable { var version: Int; var decisions: [Decision] }

    /// nil: decisions are kept in memory only (tests, or no state directory).
    public let path: String?

    public init(path: String?) { self.path = path }

    /// `$XDG_STATE_HOME/auth-agent/consent.json`, else `~/.local/state/auth-agent/consent.json`.
    public static func defaultPath(environment: [String: String]) -> String? {
        if let state = environment["XDG_STATE_HOME"], state.hasPrefix("/") { return "\(state)/auth-agent/consent.json" }
        if let home = environment["HOME"], home.hasPrefix("/") { return "\(home)/.local/state/auth-agent/consent.json" }
        return nil
    }

    public enum LoadError: Error, Equatable { case unreadable(String), corrupt }

    /// The stored decisions; an absent file is an empty list.
    public func load() throws(LoadError) -> [Decision] {
        guard let path else { return [] }
        guard FileManager.default.fileExists(atPath: path) else { return [] }
        guard let data = FileManager.default.contents(atPath: path) else { throw .unreadable(path) }
        guard let file = try? JSONDecoder().decode(File.self, from: data), file.version == 1 else { throw .corrupt }
        return file.decisions
    }

    /// Replaces the file with `decisions`, atomically. Returns an error text on failure (the decision still holds
    /// in memory until the agent stops).
    public func save(_ decisions: [Decision]) -> String? {
        guard let path else { return nil }
        let directory = ConsentStore.directory(of: path)
        do {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true,
                                                    attributes: [.posixPermissions: 0o700])
        } catch {
            let code = ((error as? CocoaError)?.underlying as? POSIXError)?.code.rawValue
            return "cannot create \(directory): \(code.map { String(cString: strerror($0)) } ?? "\(error)")"
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        guard let data = try? encoder.encode(File(version: 1, decisions: decisions)) else { return "cannot encode the decisions" }
        let temporary = "\(path).tmp.\(getpid())"
        let fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard fd >= 0 else { return "cannot write \(temporary): \(String(cString: strerror(errno)))" }
        var offset = 0
        let bytes = [UInt8](data)
        while offset < bytes.count {
            let n = bytes[offset...].withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
            if n <= 0 { break }
            offset += n
        }
        let synced = fsync(fd) == 0
        close(fd)
        guard offset == bytes.count, synced, rename(temporary, path) == 0 else {
            unlink(temporary)
            return "cannot write \(path): \(String(cString: strerror(errno)))"
        }
        return nil
    }

    /// The directory part of `path`, as NSString's `deletingLastPathComponent` gives it ("/a//b/" -> "/a").
    static func directory(of path: String) -> String {
        let parent = path.split(separator: "/").dropLast().joined(separator: "/")
        return path.hasPrefix("/") ? "/" + parent : parent
    }
}
