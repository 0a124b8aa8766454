/// Who a local client is, as the agent's access policy sees it: facts the agent read from the kernel
/// (`/proc/PID/exe`, `/proc/PID/cgroup`, the Flatpak sandbox's `.flatpak-info`), never anything the client sent.
/// Pure value: the front ends derive it (AgentServer's `Caller.identify`), the policy judges it.
public struct ClientIdentity: Sendable, Hashable {
    /// The executable's path as the kernel names it, without the " (deleted)" suffix; nil when unreadable.
    public var exe: String?
    /// The executable was deleted or replaced since the process started: the path no longer names what runs.
    public var exeDeleted: Bool
    /// The systemd unit (`mbsync.service`, `app-gnome-foo-123.scope`, `session-2.scope`) from the cgroup, if any.
    public var unit: String?
    /// The Flatpak application id when the caller runs in a Flatpak sandbox.
    public var flatpakApp: String?

    public init(exe: String?, exeDeleted: Bool = false, unit: String? = nil, flatpakApp: String? = nil) {
        self.exe = exe
        self.exeDeleted = exeDeleted
        self.unit = unit
        self.flatpakApp = flatpakApp
    }

    /// The name consent decisions are remembered under (`authctl forget`, the consent file): `flatpak:APP` for a
    /// sandboxed app (its paths are the sandbox's), else the executable's path. Nil when the caller cannot be named
    /// reliably (unknown or deleted executable): such a caller can be neither listed nor remembered.
    public var consentKey: String? {
        if let flatpakApp { return "flatpak:\(flatpakApp)" }
        guard let exe, !exeDeleted else { return nil }
        return exe
    }

    /// One line for people: messages, `authctl pending`, the notification.
    public var summary: String {
        var parts: [String] = []
        if let flatpakApp { parts.append("flatpak:\(flatpakApp)") }
        parts.append(exe.map { exeDeleted ? "\($0) (deleted)" : $0 } ?? "unknown executable")
        if let unit { parts.append("unit:\(unit)") }
        return parts.joined(separator: " ")
    }
}
