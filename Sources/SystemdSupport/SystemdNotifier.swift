import CSystemd

/// The service manager's notification protocol (`sd_notify(3)`): readiness, status text, stopping, watchdog.
///
/// Every call is a no-op that returns false when `NOTIFY_SOCKET` is not set (not started by systemd, or a unit
/// with `Type=simple`), so callers never need to check first. The environment is left as is, so helper
/// processes the agent starts would also see `NOTIFY_SOCKET`; the agent starts none that notify.
public enum SystemdNotifier {
    /// Sends newline-separated `KEY=VALUE` assignments. Returns whether a message was sent.
    @discardableResult
    public static func notify(_ state: String) -> Bool {
        sd_notify(0, state) > 0
    }

    /// `READY=1`: start-up is complete (the socket is bound and the agent answers).
    @discardableResult
    public static func ready(status: String? = nil) -> Bool {
        notify(status.map { "READY=1\nSTATUS=\(singleLine($0))" } ?? "READY=1")
    }

    /// `STATUS=...`: one line for `systemctl status`.
    @discardableResult
    public static func status(_ text: String) -> Bool {
        notify("STATUS=\(singleLine(text))")
    }

    /// `STOPPING=1`: shutdown has begun.
    @discardableResult
    public static func stopping() -> Bool {
        notify("STOPPING=1")
    }

    /// `WATCHDOG=1`: the keep-alive ping for `WatchdogSec=`.
    @discardableResult
    public static func watchdog() -> Bool {
        notify("WATCHDOG=1")
    }

    /// The interval at which systemd expects `WATCHDOG=1` (`WatchdogSec=`), or nil when no watchdog applies to
    /// this process. Ping at half of it.
    public static func watchdogInterval() -> Duration? {
        var usec: UInt64 = 0
        guard sd_watchdog_enabled(0, &usec) > 0, usec > 0 else { return nil }
        return .microseconds(Int64(clamping: usec))
    }

    /// A newline in STATUS would start a new assignment.
    private static func singleLine(_ text: String) -> String {
        String(text.map { $0.isNewline ? " " : $0 })
    }
}
