import FoundationEssentials

/// One account's "sign-in valid until", and when to tell the user about it: a warning once the end is within
/// `warnBefore` (at most once a day, until the end), and one "ended" when it passes. Pure: stepped on a wall-clock
/// `now` that the caller passes, so it is tested step by step without sleeping.
public struct SignInExpiryWatch: Sendable, Equatable {
    public enum Action: Sendable, Equatable {
        case none
        /// Tell the user the sign-in ends at this date (a notification and a journal line).
        case warn(validUntil: Date)
        /// The date passed: the account needs a new sign-in (reported once per deadline).
        case ended(validUntil: Date)
    }

    /// Warnings of one deadline come at most this often.
    public static let repeatEvery: TimeInterval = 24 * 3600

    public private(set) var validUntil: Date?
    /// When the user was last warned of this deadline (kept in the keyring item with it).
    public private(set) var lastWarned: Date?
    private var endReported = false

    public init(validUntil: Date? = nil) {
        self.validUntil = validUntil
    }

    /// A deadline learnt from a sign-in, a refresh or the keyring (nil: none known, as after sign-out). A deadline
    /// that moved later and out of the warning window (a new sign-in, an idle period that slid) starts afresh; one
    /// still inside it keeps the day's warning, so a refresh does not repeat it.
    public mutating func update(_ deadline: Date?, now: Date, warnBefore: Duration) {
        defer { validUntil = deadline }
        guard let deadline else {
            lastWarned = nil
            endReported = false
            return
        }
        if deadline > now { endReported = false }
        if let old = validUntil, deadline <= old { return }
        if now < deadline.addingTimeInterval(-SignInDeadline.seconds(warnBefore)) { lastWarned = nil }
    }

    /// A warning an earlier run of the agent gave for the current deadline (read from the keyring item): counted as
    /// if this run had given it, so starting the agent again the same day does not repeat it.
    public mutating func restoreWarning(_ at: Date?) {
        guard let at, validUntil != nil else { return }
        if lastWarned.map({ at > $0 }) ?? true { lastWarned = at }
    }

    /// What to do at `now`; records what it returns, so each warning or end is returned once.
    public mutating func step(now: Date, warnBefore: Duration) -> Action {
        guard let until = validUntil else { return .none }
        if now >= until {
            if endReported { return .none }
            endReported = true
            return .ended(validUntil: until)
        }
        guard now >= until.addingTimeInterval(-SignInDeadline.seconds(warnBefore)) else { return .none }
        if let last = lastWarned, now.timeIntervalSince(last) < SignInExpiryWatch.repeatEvery { return .none }
        lastWarned = now
        return .warn(validUntil: until)
    }

    /// When ``step(now:warnBefore:)`` may next act (nil: nothing to wait for).
    public func nextStep(after now: Date, warnBefore: Duration) -> Date? {
        guard let until = validUntil, !endReported else { return nil }
        if now >= until { return now }
        let warnAt = until.addingTimeInterval(-SignInDeadline.seconds(warnBefore))
        if now < warnAt { return warnAt }
        guard let last = lastWarned else { return now }
        return min(until, last.addingTimeInterval(SignInExpiryWatch.repeatEvery))
    }

    /// Whether the sign-in has ended at `now` (status shows the account as needing a sign-in).
    public func hasEnded(at now: Date) -> Bool {
        validUntil.map { now >= $0 } ?? false
    }
}
