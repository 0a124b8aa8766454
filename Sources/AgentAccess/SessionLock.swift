import Synchronization

/// Whether the user's graphical session is locked, for accounts and grants that lock with it (`lock_with_session`,
/// `authctl grant --lock-with-session`): logind's `LockedHint` on the user's display session (set by lockers that
/// tell logind: GNOME's, KDE's), or `authctl lock` for lockers that set no hint (swaylock: `authctl lock` before it,
/// `authctl unlock` after it). Either one locks; `authctl unlock` clears only its own lock.
public final class SessionLock: Sendable {
    private struct State {
        /// logind's hint; nil while it is unknown (no system bus, no logind, no display session).
        var hint: Bool?
        var manual = false
    }

    private let state = Mutex(State())

    public init() {}

    /// logind's `LockedHint`, as the system-bus watcher read it (nil: cannot be known).
    public func setHint(_ locked: Bool?) { state.withLock { $0.hint = locked } }

    /// `authctl lock` (true) and `authctl unlock` (false).
    public func setManual(_ locked: Bool) { state.withLock { $0.manual = locked } }

    /// What locks the session now: `logind` (its hint), `authctl lock`, both, or nil when it is not locked.
    public var lockedBy: String? {
        let now = state.withLock { $0 }
        switch (now.hint == true, now.manual) {
        case (true, true): return "the screen locker (logind) and `authctl lock`"
        case (true, false): return "the screen locker (logind)"
        case (false, true): return "`authctl lock`"
        case (false, false): return nil
        }
    }

    public var isLocked: Bool { lockedBy != nil }

    /// logind's hint as last read (nil: unknown), for `status`.
    public var hint: Bool? { state.withLock { $0.hint } }
}
