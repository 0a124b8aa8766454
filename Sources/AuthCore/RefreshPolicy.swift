/// When a cached access token is good enough to hand out.
public struct RefreshPolicy: Sendable, Equatable {
    /// Never hand out a token with less than this left, whatever the caller asked: covers clock skew and the time
    /// the caller needs to use it.
    public var minimumRemaining: Duration

    public init(minimumRemaining: Duration = .seconds(10)) { self.minimumRemaining = minimumRemaining }

    public func isFresh(expiresAt: ContinuousClock.Instant, now: ContinuousClock.Instant, minValid: Duration) -> Bool {
        now + max(minValid, minimumRemaining) <= expiresAt
    }
}
