/// What kind of session a process runs in, as far as signing in through a browser is concerned.
public struct SessionKind: Sendable, Equatable {
    /// Started over SSH (`SSH_CONNECTION` or `SSH_TTY`): a browser opened here is on the remote machine.
    public var ssh: Bool
    /// Neither `DISPLAY` nor `WAYLAND_DISPLAY` is set: no graphical browser can open.
    public var headless: Bool

    public init(environment: [String: String]) {
        func set(_ key: String) -> Bool { !(environment[key] ?? "").isEmpty }
        ssh = set("SSH_CONNECTION") || set("SSH_TTY")
        headless = !set("DISPLAY") && !set("WAYLAND_DISPLAY")
    }
}
