import ConfigFile

/// What authctl says when it runs inside a Flatpak app's sandbox and finds no agent: the agent runs outside the
/// sandbox, so "not running, start it with systemctl" is wrong there twice (it may well run, and systemctl does not
/// reach the host from inside). Pure: authctl reads the facts (``FlatpakSandbox`` in authctl).
public enum SandboxReach {
    /// The finish-arg that shows the agent's socket directory in a sandbox (docs/INTEGRATIONS.md, "Flatpak apps").
    public static let socketPermission = "--filesystem=xdg-run/auth-agent:ro"
    /// The finish-arg that lets an app's D-Bus proxy pass the agent's bus name.
    public static let busPermission = "--talk-name=dev.authagent.Agent"

    /// The app's id and whether its permissions show the agent's socket, from the sandbox's `/.flatpak-info`:
    /// `showsSocket` is nil when the file has no `[Context]` to tell (then authctl looks for the directory).
    /// Flatpak writes the final permissions there, without negations: `filesystems=xdg-run/auth-agent:ro;...`.
    /// `complete` false: `text` is the file's first bytes only (its last line may be cut).
    public static func read(flatpakInfo text: String, complete: Bool = true) -> (app: String?, showsSocket: Bool?) {
        var group = "", app: String?, showsSocket: Bool?
        for line in KeyFile.lines(text, complete: complete) {
            switch line {
            case .group(let name):
                group = name
                if group == "Context" { showsSocket = showsSocket ?? false }
            case .entry(let key, let value):
                if group == "Application", key == "name", app == nil { app = value }
                if group == "Context", key == "filesystems" {
                    showsSocket = KeyFile.list(value).contains { entry in
                        let path = entry.split(separator: ":", maxSplits: 1).first.map(String.init) ?? ""
                        return path == "xdg-run/auth-agent" || path.hasPrefix("xdg-run/auth-agent/") || path == "xdg-run"
                    }
                }
            }
        }
        return (app, showsSocket)
    }

    /// `app` is the sandbox's application id when known; `socket` the path authctl tried; `socketShown` whether the
    /// app has the permission that shows the socket's directory.
    public static func unreachable(app: String?, socket: String, socketShown: Bool) -> (message: String, hint: String) {
        let appID = app ?? "APP-ID"
        let inside = "authctl runs inside the Flatpak sandbox of \(app ?? "an app")"
        guard socketShown else {
            return ("\(inside), which cannot see the agent's socket (\(socket)): the app lacks the permission `\(socketPermission)`",
                    "on the host, outside the sandbox: `flatpak override --user \(socketPermission) \(appID)`, then start the app again (an app that calls the agent over D-Bus needs `\(busPermission)` instead; docs/INTEGRATIONS.md, \"Flatpak apps\")")
        }
        return ("\(inside); auth-agent is not running outside it (nothing listens on \(socket))",
                "start it on the host, outside the sandbox: `systemctl --user start auth-agent.socket` (or run `auth-agent &`)")
    }
}
