/// Whole days left until a date: the one count behind every "in N days" the user reads (`authctl status`, the agent's
/// sign-in warning and its journal line), so two readings in the same second agree. Counted on whole Unix seconds,
/// the precision the keyring item and the wire carry dates in (a fraction of a second of `now` is dropped), and
/// rounded down: "in 2 days" means at least 48 hours are left, so a warning never promises more time than there is.
public enum DaysLeft {
    public static let secondsPerDay = 86_400

    /// Whole days from `now` until `until` (Unix seconds); 0 when less than a day is left or the date passed.
    public static func count(until: Int, now: Int) -> Int {
        until > now ? (until - now) / secondsPerDay : 0
    }

    /// The same for seconds with a fraction (a `Date`'s `timeIntervalSince1970`), each cut to its whole second.
    public static func count(until: Double, now: Double) -> Int {
        count(until: whole(until), now: whole(now))
    }

    /// "in 1 day", "in 2 days"; nil when less than a day is left (each place says that its own way).
    public static func phrase(_ days: Int) -> String? {
        days >= 1 ? "in \(days) day\(days == 1 ? "" : "s")" : nil
    }

    private static func whole(_ seconds: Double) -> Int {
        guard seconds.isFinite else { return 0 }
        return Int(min(max(seconds, -1e15), 1e15).rounded(.down))
    }
}
