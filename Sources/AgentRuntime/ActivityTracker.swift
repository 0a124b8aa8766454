import Synchronization

/// Counts what keeps the agent busy from the outside: open socket connections and D-Bus calls in flight, and when
/// the last of them ended. Front ends call ``begin()`` / ``end()``; thread-safe.
public final class ActivityTracker: @unchecked Sendable {
    private let lock = Mutex(())
    private var active = 0
    private var lastActive: ContinuousClock.Instant

    public init(now: ContinuousClock.Instant = .now) { lastActive = now }

    public func begin() { lock.withLock { _ in active += 1 } }

    public func end(now: ContinuousClock.Instant = .now) {
        lock.withLock { _ in
            active -= 1
            lastActive = now
        }
    }

    /// Marks the agent busy at `now` (e.g. the broker was refreshing) without a begin/end pair.
    public func touch(now: ContinuousClock.Instant = .now) { lock.withLock { _ in lastActive = now } }

    public var snapshot: (active: Int, lastActive: ContinuousClock.Instant) { lock.withLock { _ in (active, lastActive) } }
}
