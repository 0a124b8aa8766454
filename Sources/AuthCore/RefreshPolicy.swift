/// When a cached access token is good enough to hand out, when to refresh it ahead of expiry, and how long to
/// wait after a failure. Pure: every decision takes `now` (and randomness) as input, so it is tested without sleeping.
public struct RefreshPolicy: Sendable, Equatable {
    /// Never hand out a token with less than this left, whatever the caller asked: covers clock skew and the time
    /// the caller needs to use it.
    public var minimumRemaining: Duration
    /// Refresh ahead of expiry when this share of the lifetime is left...
    public var earlyFraction: Double
    /// ...but at least this much before expiry (capped at half the lifetime for very short-lived tokens).
    public var earlyMinimum: Duration
    /// Proactive refresh keeps tokens fresh only for accounts used within this window.
    public var recentUse: Duration
    /// Backoff after transient failures: base * 2^(failures-1), at most `backoffCap`, with ±25 % jitter; never
    /// shorter than the server's Retry-After.
    public var backoffBase: Duration
    public var backoffCap: Duration
    /// While callers need a token the server is asked again this long after a failure, whatever the backoff: a
    /// server that is back serves them within it, and single flight keeps the agent to about one request this often
    /// in an outage, however many callers ask. Never shorter than the server's Retry-After.
    public var demandRetry: Duration

    public init(minimumRemaining: Duration = .seconds(10), earlyFraction: Double = 0.1, earlyMinimum: Duration = .seconds(60),
                recentUse: Duration = .seconds(3600), backoffBase: Duration = .seconds(2), backoffCap: Duration = .seconds(300),
                demandRetry: Duration = .seconds(1)) {
        self.minimumRemaining = minimumRemaining
        self.earlyFraction = earlyFraction
        self.earlyMinimum = earlyMinimum
        self.recentUse = recentUse
        self.backoffBase = backoffBase
        self.backoffCap = backoffCap
        self.demandRetry = demandRetry
    }

    /// The one place a caller's `minValid` is checked. It means "fresh enough, or the freshest the server will
    /// give": a token of `lifetime` must stay valid for `minValid`, but never for more than a fresh token of that
    /// lifetime has left at its early-refresh moment (``attainable(lifetime:)``), because a server whose tokens live
    /// shorter than `minValid` would only hand out another such token, and asking again for each caller would be a
    /// refresh storm. Never less than ``minimumRemaining``.
    public func isFresh(expiresAt: ContinuousClock.Instant, lifetime: Duration, now: ContinuousClock.Instant,
                        minValid: Duration) -> Bool {
        // The cap only ever lowers what `minValid` asks: a token with `minValid` (and ``minimumRemaining``) left is
        // fresh without it. That is nearly every cached-token request, and the cap's `Duration * Double` costs more
        // than the rest of the check.
        if now + max(minValid, minimumRemaining) <= expiresAt { return true }
        return now + max(min(minValid, attainable(lifetime: lifetime)), minimumRemaining) <= expiresAt
    }

    /// What a token of `lifetime` has left when it is due for its early refresh (without jitter): the most any caller
    /// can count on from a server that issues such tokens.
    public func attainable(lifetime: Duration) -> Duration {
        lifetime - earlyMargin(lifetime: lifetime, jitter: 0)
    }

    /// How long before expiry a token of this lifetime should be refreshed. `jitter` in 0..<1 spreads refreshes of
    /// many accounts (and many agents) over up to a fifth more of the margin.
    public func earlyMargin(lifetime: Duration, jitter: Double) -> Duration {
        let fraction = lifetime * earlyFraction
        let margin = min(max(fraction, earlyMinimum), lifetime / 2)
        return margin + margin * (0.2 * min(max(jitter, 0), 1))
    }

    /// The moment a token should be refreshed ahead of its expiry.
    public func refreshAt(receivedAt: ContinuousClock.Instant, lifetime: Duration, jitter: Double) -> ContinuousClock.Instant {
        receivedAt + lifetime - earlyMargin(lifetime: lifetime, jitter: jitter)
    }

    /// The wait before the next attempt after `failures` consecutive transient failures.
    public func backoff(failures: Int, retryAfter: Int?, jitter: Double) -> Duration {
        let exponent = max(0, min(failures - 1, 20))
        var delay = min(backoffBase * (1 << exponent), backoffCap)
        delay = delay * (0.75 + 0.5 * min(max(jitter, 0), 1))
        if let retryAfter { delay = max(delay, .seconds(retryAfter)) }
        return delay
    }

    /// How long after a failure a caller's request may ask the server again: ``demandRetry``, or the server's
    /// Retry-After when that is longer.
    public func demandWait(retryAfter: Int?) -> Duration {
        max(demandRetry, .seconds(retryAfter ?? 0))
    }

    /// Failures that say nothing about the sign-in itself: the refresh token is kept and the next attempt waits.
    public static func isTransient(_ code: AuthError.Code) -> Bool {
        switch code {
        case .serverUnreachable, .serverError, .tlsError, .invalidTokenResponse, .invalidMetadata, .issuerMismatch,
             .pkceUnsupported, .insecureEndpoint, .keyringError, .tpmUnavailable: return true
        default: return false
        }
    }
}

extension RefreshPolicy {
    /// Failures of the network path to the server (DNS, connect, reset, timeout: all `server_unreachable`), as
    /// opposed to an answer from it. Only these end their backoff early when the network comes back (``WakePlan``).
    public static func isNetworkFailure(_ code: AuthError.Code) -> Bool {
        code == .serverUnreachable
    }
}
