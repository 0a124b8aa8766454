import FoundationEssentials

/// How long a provider keeps a sign-in (its refresh token) alive, as the configuration states it
/// (`sign_in_lifetime`, `sign_in_lifetime_kind`; presets write the provider's documented value): a fixed period from
/// the sign-in, or an idle period that starts again with every successful refresh (Microsoft's 90 days).
public struct SignInLifetime: Sendable, Equatable {
    public enum Kind: String, Sendable, Equatable {
        /// Counted from the sign-in; refreshes do not extend it.
        case fixed
        /// Counted from the last successful refresh (or the sign-in).
        case idle
    }

    public var period: Duration
    public var kind: Kind

    public init(period: Duration, kind: Kind) {
        self.period = period
        self.kind = kind
    }

    /// How long before the end the user is warned, unless the account says otherwise (`sign_in_warning`).
    public static let defaultWarning: Duration = .seconds(3 * 24 * 3600)
}

/// When a sign-in ends, on the wall clock (it must survive a reboot, so it is a date, not a monotonic instant).
/// Pure. The server's `refresh_token_expires_in` wins over the configured ``SignInLifetime``: the server knows.
public enum SignInDeadline {
    /// After a sign-in (code exchange or device grant).
    public static func afterSignIn(now: Date, serverSeconds: Int?, policy: SignInLifetime?) -> Date? {
        let now = whole(now)
        if let serverSeconds { return now.addingTimeInterval(TimeInterval(serverSeconds)) }
        return policy.map { now.addingTimeInterval(seconds($0.period)) }
    }

    /// After a successful refresh: the server's value if it sent one; an idle period starts again; a fixed one (or
    /// none) keeps `previous`.
    public static func afterRefresh(now: Date, serverSeconds: Int?, policy: SignInLifetime?, previous: Date?) -> Date? {
        let now = whole(now)
        if let serverSeconds { return now.addingTimeInterval(TimeInterval(serverSeconds)) }
        if let policy, policy.kind == .idle { return now.addingTimeInterval(seconds(policy.period)) }
        return previous
    }

    /// Whether `new` must be written to the keyring although the refresh token did not change. An idle period slides
    /// with every refresh (hourly for a 1 h token): writing each slide would cost a keyring write per refresh, so a
    /// later deadline is written once it moved by a day; the stored one is then at most a day early (a warning comes
    /// early, never late). An earlier deadline (the server shortened it) is written at once.
    public static func needsWrite(_ new: Date?, stored: Date?) -> Bool {
        guard let new else { return false }
        guard let stored else { return true }
        let moved = new.timeIntervalSince(stored)
        return moved >= 24 * 3600 || moved <= -60
    }

    /// Whole seconds, as the keyring item and the wire carry it, so what status shows before and after a restart is
    /// the same number.
    static func whole(_ date: Date) -> Date {
        Date(timeIntervalSince1970: date.timeIntervalSince1970.rounded(.down))
    }

    static func seconds(_ duration: Duration) -> TimeInterval {
        let parts = duration.components
        return TimeInterval(parts.seconds) + TimeInterval(parts.attoseconds) / 1e18
    }
}
