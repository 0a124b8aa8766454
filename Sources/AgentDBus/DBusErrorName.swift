import AgentIPC

/// Named D-Bus errors that mirror the socket protocol's stable error codes: `login_required` is
/// `dev.authagent.Error.LoginRequired`, and so on for every ``ErrorCode``. Clients switch on the name.
public enum DBusErrorName {
    public static let prefix = "dev.authagent.Error."
    /// The caller's uid is not the agent's (the standard name, which D-Bus clients already know).
    public static let accessDenied = "org.freedesktop.DBus.Error.AccessDenied"

    /// The D-Bus error name for a socket error code (also for codes a newer agent may add).
    public static func forCode(_ code: String) -> String {
        prefix + code.split(separator: "_").map { $0.prefix(1).uppercased() + $0.dropFirst() }.joined()
    }
}
