/// One `allowed_clients` entry of an account. Matching is exact byte equality on what the kernel reported; there
/// are no globs or prefixes, so an entry can never match more than the one program, unit or app it names.
///
/// - `/usr/bin/git`: an absolute, normalised path; matches a program of the desktop whose executable is that path,
///   unless the binary was deleted or replaced after the process started; never a caller in a root or pid
///   namespace of its own (its paths are its own).
/// - `unit:mbsync.service`: matches a program of the desktop, a toolbox-like container or a container whose systemd
///   unit (service or scope, from its cgroup: the host gave it) is exactly that; never an app or a forwarded host.
/// - `flatpak:org.gnome.Evolution`: matches a caller in that app's Flatpak sandbox.
/// - `ssh:build-box`: matches requests forwarded from that host by `authctl forward`, named as the person typed it
///   (`authctl forward build-box`: a `Host` alias) or as ssh checks its key (its `HostKeyAlias`, else its `HostName`
///   with `:PORT` when not 22), whatever key ssh accepted for it (ssh itself refuses a changed key).
///   `ssh:build-box@SHA256:...` matches only while the host shows that key.
///   `ssh:unknown-host` matches a forward the agent made no session for (a bare `ssh -R` of its socket): any host.
///
/// A request relayed by the agent's authctl (``ClientIdentity/relay``) is judged by the program behind authctl. A path
/// or unit entry naming the relay itself (the authctl that connected: `/usr/bin/authctl`, or the unit it runs in)
/// matches too: listing authctl serves whatever runs it (a person typing `authctl token` in a terminal). The shells in
/// between are never matched: listing `/usr/bin/dash` must not serve everything that runs `sh -c authctl`.
public enum ClientRule: Sendable, Hashable, CustomStringConvertible {
    case path(String)
    case unit(String)
    case flatpak(String)
    /// A forwarded host by name, pinned to a host key fingerprint when one is given; `host` nil: an unknown forward.
    case ssh(host: String?, fingerprint: String?)

    /// The `ssh:` entry that stands for forwards from a host nobody named.
    public static let unknownHost = "unknown-host"

    public var description: String {
        switch self {
        case .path(let path): return path
        case .unit(let unit): return "unit:\(unit)"
        case .flatpak(let app): return "flatpak:\(app)"
        case .ssh(let host, let fingerprint):
            return "ssh:\(host ?? ClientRule.unknownHost)" + (fingerprint.map { "@\($0)" } ?? "")
        }
    }

    /// Why an entry was refused, for the config error.
    public struct Rejection: Error, Sendable, Equatable {
        public var reason: String
    }

    /// Parses an entry, refusing anything that is not exactly one of the three forms.
    public static func parse(_ text: String) -> Result<ClientRule, Rejection> {
        if text.contains(where: { "*?[]{}".contains($0) }) {
            return .failure(Rejection(reason: "'\(text)' has a glob character; entries match exactly (a path, unit:NAME or flatpak:APP-ID)"))
        }
        if text.hasPrefix("/") {
            let parts = text.split(separator: "/", omittingEmptySubsequences: false).dropFirst()
            guard !text.hasSuffix("/"), !parts.contains(where: { $0.isEmpty || $0 == "." || $0 == ".." }),
                  !text.contains(where: { $0.isNewline }) else {
                return .failure(Rejection(reason: "'\(text)' is not a normalised absolute path of a program (no //, /./, /../ or trailing /)"))
            }
            return .success(.path(text))
        }
        if text.hasPrefix("unit:") {
            let name = String(text.dropFirst(5))
            guard name.hasSuffix(".service") || name.hasSuffix(".scope"), name.count <= 255,
                  name.unicodeScalars.allSatisfy({ isUnitCharacter($0) }), !name.hasPrefix(".") else {
                return .failure(Rejection(reason: "'\(text)' must name a service or scope, e.g. unit:mbsync.service"))
            }
            return .success(.unit(name))
        }
        if text.hasPrefix("flatpak:") {
            let app = String(text.dropFirst(8))
            guard isFlatpakAppID(app) else {
                return .failure(Rejection(reason: "'\(text)' must name a Flatpak application id, e.g. flatpak:org.gnome.Evolution"))
            }
            return .success(.flatpak(app))
        }
        if text.hasPrefix("ssh:") {
            return parseHost(String(text.dropFirst(4)), entry: text)
        }
        return .failure(Rejection(reason: "'\(text)' is neither an absolute path, unit:NAME, flatpak:APP-ID nor ssh:HOST"))
    }

    /// Whether this entry names `identity`: each kind of caller is named by its own kind of entry only (see the
    /// type's documentation), byte for byte (``sameBytes(_:_:)``), never as Unicode text. A forwarded host is never
    /// named by the path or unit of the local ssh that carries it; a caller the agent cannot read, by nothing.
    public func matches(_ identity: ClientIdentity) -> Bool {
        switch (self, identity.kind) {
        case (.path(let path), .desktop):
            return ClientRule.sameBytes(identity.policyExe, path) || ClientRule.sameBytes(identity.relay?.exe, path)
        case (.unit(let unit), .desktop):
            return ClientRule.sameBytes(identity.unit, unit) || ClientRule.sameBytes(identity.relay?.unit, unit)
        case (.unit(let unit), .hostContainer), (.unit(let unit), .container):
            return ClientRule.sameBytes(identity.unit, unit)
        case (.flatpak(let app), .flatpak(let caller)):
            return ClientRule.sameBytes(caller.id, app)
        case (.ssh(nil, _), .unknownForward):
            return true
        case (.ssh(let host?, let pinned), .forwarded(let caller)):
            return caller.isNamed(host) && (pinned.map { ClientRule.sameBytes(caller.fingerprint, $0) } ?? true)
        default:
            return false
        }
    }

    /// The key an `ssh:` entry pins for `host`, when it names that host but under another key than the one it
    /// shows: the host's key changed since the entry was written (or another host answers under its name).
    public func pinnedOtherKey(for host: ClientIdentity.ForwardedHost) -> String? {
        guard case .ssh(let name?, let pinned?) = self, host.isNamed(name),
              !ClientRule.sameBytes(host.fingerprint, pinned) else { return nil }
        return pinned
    }

    /// Why this entry can match no caller at all, for `status` and `doctor`; nil when it can. ssh names a host on
    /// port 22 without `:22` (and a name typed has no port), so `ssh:HOST:22` never names a forward.
    public var neverMatches: String? {
        guard case .ssh(let host?, let pinned) = self, host.hasSuffix(":22") else { return nil }
        let named = "ssh:" + host.dropLast(3) + (pinned.map { "@\($0)" } ?? "")
        return "\(description) never matches: ssh names a host on port 22 without :22; write \(named)"
    }

    /// `HOST` or `HOST@SHA256:FINGERPRINT` after `ssh:`.
    static func parseHost(_ text: String, entry: String) -> Result<ClientRule, Rejection> {
        let parts = text.split(separator: "@", maxSplits: 1, omittingEmptySubsequences: false).map(String.init)
        let host = parts[0]
        let fingerprint = parts.count == 2 ? parts[1] : nil
        guard isHostName(host) else {
            return .failure(Rejection(reason: "'\(entry)' must name a host as ssh does (letters, digits, '.', '-', '_', ':PORT'), e.g. ssh:build-box or ssh:build-box@SHA256:..."))
        }
        if let fingerprint, !isFingerprint(fingerprint) {
            return .failure(Rejection(reason: "'\(entry)': the host key must be a SHA256 fingerprint as ssh prints it (SHA256: and 43 base64 characters)"))
        }
        if host == unknownHost {
            guard fingerprint == nil else { return .failure(Rejection(reason: "'\(entry)': an unknown host has no key to pin")) }
            return .success(.ssh(host: nil, fingerprint: nil))
        }
        return .success(.ssh(host: host, fingerprint: fingerprint))
    }

    /// A host name as `authctl forward` names hosts: ssh's host name or alias, `:PORT` possibly added, at most 255
    /// bytes of letters, digits, `.`, `-`, `_` and `:`.
    public static func isHostName(_ name: String) -> Bool {
        !name.isEmpty && name.utf8.count <= 255 && !name.hasPrefix("-") && name.unicodeScalars.allSatisfy {
            ("a"..."z").contains($0) || ("A"..."Z").contains($0) || ("0"..."9").contains($0) || ".-_:".unicodeScalars.contains($0)
        }
    }

    /// ssh's SHA256 fingerprint: `SHA256:` and the digest in 43 unpadded base64 characters.
    public static func isFingerprint(_ text: String) -> Bool {
        guard text.hasPrefix("SHA256:") else { return false }
        let digest = text.dropFirst(7)
        return digest.utf8.count == 43 && digest.unicodeScalars.allSatisfy {
            ("a"..."z").contains($0) || ("A"..."Z").contains($0) || ("0"..."9").contains($0) || $0 == "+" || $0 == "/"
        }
    }

    /// Whether two names (paths, units, apps) are the same bytes. Swift's `String ==` (and its hashing) uses
    /// canonical equivalence: `café` with a precomposed `é` equals `cafe` with a combining accent, yet they are two
    /// different files to the kernel. Every comparison of a caller's names goes through here.
    public static func sameBytes(_ name: String?, _ other: String) -> Bool {
        guard let name else { return false }
        return name.utf8.elementsEqual(other.utf8)
    }

    static func isUnitCharacter(_ scalar: Unicode.Scalar) -> Bool {
        ("a"..."z").contains(scalar) || ("A"..."Z").contains(scalar) || ("0"..."9").contains(scalar) || ":-_.\\@".unicodeScalars.contains(scalar)
    }

    /// Flatpak's rule: at least three dot-separated elements of `[A-Za-z0-9_-]`, not starting with a digit, at
    /// most 255 bytes.
    public static func isFlatpakAppID(_ app: String) -> Bool {
        let elements = app.split(separator: ".", omittingEmptySubsequences: false)
        guard app.utf8.count <= 255, elements.count >= 3 else { return false }
        return elements.allSatisfy { element in
            guard let first = element.unicodeScalars.first, !("0"..."9").contains(first) else { return false }
            return element.unicodeScalars.allSatisfy {
                ("a"..."z").contains($0) || ("A"..."Z").contains($0) || ("0"..."9").contains($0) || $0 == "_" || $0 == "-"
            }
        }
    }
}

extension ClientIdentity.ForwardedHost {
    /// Whether `name` names this host: the name the person typed, or the one ssh checks its key under.
    public func isNamed(_ name: String) -> Bool {
        ClientRule.sameBytes(self.name, name) || ClientRule.sameBytes(alias, name)
    }
}
