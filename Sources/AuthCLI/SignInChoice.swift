/// Which sign-in `authctl login` asks the agent for, from its flags and its own environment (not the agent's: the
/// agent may run in a desktop session while the person types over SSH).
public enum SignInChoice: Equatable, Sendable {
    /// Browser and loopback redirect (the agent falls back to the device grant if no browser starts).
    case redirect
    /// `--no-browser`: print the URL, read the pasted redirect.
    case paste
    /// `--device`: the device grant or an error.
    case device
    /// Headless or SSH: the device grant when the server offers it, else the redirect.
    case preferDevice

    public static func choose(device: Bool, noBrowser: Bool, environment: [String: String]) -> SignInChoice {
        if device { return .device }
        if noBrowser { return .paste }
        return isRemoteOrHeadless(environment) ? .preferDevice : .redirect
    }

    /// No graphical display (neither `DISPLAY` nor `WAYLAND_DISPLAY`), or an SSH session (`SSH_CONNECTION`).
    public static func isRemoteOrHeadless(_ environment: [String: String]) -> Bool {
        func set(_ key: String) -> Bool { !(environment[key] ?? "").isEmpty }
        return set("SSH_CONNECTION") || (!set("DISPLAY") && !set("WAYLAND_DISPLAY"))
    }
}
