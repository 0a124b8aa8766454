import FoundationEssentials

/// Who asked, in audit records and pending consent requests: what the agent read from the kernel about the caller,
/// as one ``Kind`` with the members that kind has. ``described(withPID:)`` is the one place a caller is put into
/// words for people (refusals, consent questions, `pending`, `audit`, the journal).
public struct WireCaller: Codable, Sendable, Equatable {
    /// What the caller is (docs/PROTOCOL.md); an agent newer than this authctl may send a kind it does not know.
    public enum Kind: String, Sendable {
        /// A program of the desktop: the agent's root and pid namespace.
        case desktop
        /// A root of its own in the agent's pid namespace, naming no app (toolbox, distrobox): served as host code.
        case hostContainer = "host_container"
        /// A pid namespace of its own, naming no app (podman, docker): confined, named by its unit only.
        case container
        /// A Flatpak app (``flatpakApp``): confined.
        case flatpak
        /// A caller the agent cannot read or believe (``unidentified`` says why): confined, named by nothing.
        case unidentified
        /// Another host through an `authctl forward` session (``host``, ``hostKey``): confined.
        case sshHost = "ssh_host"
        /// An ssh forward of the agent's socket not made by `authctl forward`: confined.
        case sshUnknown = "ssh_unknown"
        /// A connection through a grant's socket (``grant``): confined to the grant's accounts.
        case grant
    }

    public var pid: Int32
    /// `socket`, `dbus`, or `ssh:HOST` for a request forwarded from another host (`ssh:unknown-host`: a forward
    /// the agent made no session for).
    public var via: String
    /// ``Kind``'s raw value.
    public var kind: String
    /// The executable as the kernel names it: names a program of the desktop; for any other kind, the path it shows
    /// in its own root, never judged.
    public var exe: String?
    /// The executable was deleted or replaced after the process started.
    public var exeDeleted: Bool?
    public var unit: String?
    /// Set when the process that connected (`pid`) is the agent's authctl, acting for the program the other members
    /// describe: the executables between that program and the agent, nearest to the program first.
    public var relayedBy: [String]?
    /// A Flatpak app's id; for an unidentified caller, the app its marker names, not believed.
    public var flatpakApp: String?
    /// The Flatpak instance (one run of the app) its `/.flatpak-info` names.
    public var flatpakInstance: String?
    /// The holes in the app's sandbox that let it act as any program of the user, as `flatpak override` spells them:
    /// the app is "not contained".
    public var notContained: [String]?
    /// Why an unidentified caller is not named (docs/SECURITY.md).
    public var unidentified: String?
    /// A forwarded host: the name ssh checks its key under, and the fingerprint of the key ssh was shown.
    public var host: String?
    /// A forwarded host: the name the person typed to `authctl forward` (a `Host` alias), when it is not ``host``.
    public var hostAlias: String?
    public var hostKey: String?
    /// A forwarded request: the program the remote side said asks, not verified.
    public var remoteProgram: String?
    /// A grant's caller: the grant's name (`authctl grant`).
    public var grant: String?
    /// A grant's caller: the container engine and id its cgroup names (`podman 0123abcd...`), when it does.
    public var container: String?
    /// A grant's caller: its pid namespace (`pid:[4026532...]`) when it is not the agent's.
    public var pidNamespace: String?

    public init(pid: Int32, via: String, kind: Kind = .desktop, exe: String?, exeDeleted: Bool? = nil, unit: String? = nil,
                relayedBy: [String]? = nil) {
        self.pid = pid
        self.via = via
        self.kind = kind.rawValue
        self.exe = exe
        self.exeDeleted = exeDeleted
        self.unit = unit
        self.relayedBy = relayedBy
    }

    enum CodingKeys: String, CodingKey {
        case pid, via, kind, exe, exeDeleted = "exe_deleted", unit, relayedBy = "relayed_by", flatpakApp = "flatpak_app",
             flatpakInstance = "flatpak_instance", notContained = "not_contained", unidentified, host,
             hostKey = "host_key", hostAlias = "host_alias", remoteProgram = "remote_program", grant, container,
             pidNamespace = "pid_namespace"
    }

    /// The caller in one line for people: what it is, by its kind, with every name it chose shown safely
    /// (``shown(_:)``); with `withPID`, the process and front end too (never for words sent to a confined caller,
    /// which should not learn host pids).
    public func described(withPID: Bool = false) -> String {
        var parts: [String] = []
        let exe = self.exe.map { Self.shown($0, limit: Self.pathLimit) + (exeDeleted == true ? " (deleted)" : "") }
        let known = Kind(rawValue: kind)
        // A forwarded caller's unit and pid are the local ssh's, not anything on the host.
        let forwarded = known == .sshHost || known == .sshUnknown
        switch known {
        case .desktop?:
            parts.append(exe ?? "an unknown executable")
        case .hostContainer?:
            parts.append("\(exe ?? "an unknown executable") (in a root directory of its own)")
        case .container?:
            parts.append("a container (a pid namespace of its own) running \(exe ?? "an unknown executable")")
        case .flatpak?:
            parts.append("flatpak:\(Self.shown(flatpakApp ?? "?"))")
            if let instance = flatpakInstance { parts.append("(instance \(Self.shown(instance)))") }
            if let holes = notContained { parts.append("(not contained: \(holes.map { Self.shown($0) }.joined(separator: ", ")))") }
            if let exe { parts.append(exe) }
        case .unidentified?:
            parts.append("an unidentified sandbox (\(Self.shown(unidentified ?? "unknown")))")
            if let app = flatpakApp { parts.append("claiming flatpak:\(Self.shown(app))") }
            if let exe { parts.append("showing \(exe)") }
        case .sshHost?:
            // The name the person typed first, with ssh's name for its key beside it when they differ.
            let name = hostAlias.map { "\(Self.shown($0)) (\(Self.shown(host ?? "?")))" } ?? Self.shown(host ?? "?")
            parts.append("host \(name) over ssh (host key \(Self.shown(hostKey ?? "?")))")
            if let program = remoteProgram { parts.append("running \(Self.shown(program)) (said by the host, not verified)") }
        case .sshUnknown?:
            parts.append("an unknown host over ssh (a forward of the agent's socket not made by `authctl forward`)")
        case .grant?:
            parts.append("grant \(Self.shown(grant ?? "?"))")
            if let container { parts.append("(container \(Self.shown(container)))") }
            else if pidNamespace != nil { parts.append("(a pid namespace of its own)") }
            if let exe { parts.append("running \(exe)") }
        case nil:
            parts.append("a caller of kind \(Self.shown(kind))" + (exe.map { " showing \($0)" } ?? ""))
        }
        if let relayedBy {
            parts.append(relayedBy.map { "via \(Self.shown($0.split(separator: "/").last.map(String.init) ?? $0, limit: Self.pathLimit))" }.joined(separator: " "))
        }
        if let unit, !forwarded { parts.append("unit:\(Self.shown(unit))") }
        if withPID {
            parts.append((forwarded ? "local ssh pid \(pid)" : "pid \(pid)") + (via == "socket" ? "" : " via \(Self.shown(via))"))
        }
        return parts.joined(separator: " ")
    }

    /// At most this many characters of one name are shown; a path, up to the kernel's `PATH_MAX`.
    public static let shownLimit = 200
    public static let pathLimit = 4096

    /// `text` as it may be shown to people: every control, format (bidi overrides and isolates, zero-width joiners),
    /// line or paragraph separator and private-use character replaced by U+FFFD, and at most ``shownLimit``
    /// characters (then `…`). Markup is escaped where a surface renders it (the notification), not here.
    public static func shown(_ text: String, limit: Int = shownLimit) -> String {
        var out = String.UnicodeScalarView()
        var count = 0
        for scalar in text.unicodeScalars {
            if count == limit { out.append("…"); break }
            count += 1
            switch scalar.properties.generalCategory {
            case .control, .format, .lineSeparator, .paragraphSeparator, .privateUse, .surrogate, .unassigned:
                out.append("\u{FFFD}")
            default:
                out.append(scalar)
            }
        }
        return String(out)
    }
}
