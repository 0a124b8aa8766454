/// How often an account may fail to sign in before new sign-ins must wait: the first `freeFailures` failures within
/// `window` cost nothing; after that the next sign-in waits `firstPause` after the last failure, doubling with each
/// further failure up to `maximumPause`. A successful sign-in clears the record. Pure over a list of instants, so
/// it is tested on a manual clock.
///
/// Why: a script that loops on `authctl token --interactive` against a broken account would otherwise open a browser
/// tab (or ask the server for a device code) every few seconds. Three quick retries stay free for a person who
/// mistyped a password or denied by mistake.
public struct LoginRateLimit: Sendable, Equatable {
    public var freeFailures: Int
    public var window: Duration
    public var firstPause: Duration
    public var maximumPause: Duration

    public init(freeFailures: Int = 3, window: Duration = .seconds(900), firstPause: Duration = .seconds(60),
                maximumPause: Duration = .seconds(900)) {
        self.freeFailures = freeFailures
        self.window = window
        self.firstPause = firstPause
        self.maximumPause = maximumPause
    }

    /// How long a new sign-in must still wait, or nil when it may start now.
    public func wait(failures: [ContinuousClock.Instant], now: ContinuousClock.Instant) -> Duration? {
        let recent = failures.filter { now - $0 < window }
        guard recent.count >= freeFailures, let last = recent.max() else { return nil }
        var pause = firstPause
        for _ in 0..<(recent.count - freeFailures) where pause < maximumPause { pause = pause * 2 }
        let notBefore = last + min(pause, maximumPause)
        return now < notBefore ? notBefore - now : nil
    }

    /// Whether a failed sign-in with this code counts. A cancelled sign-in (Ctrl-C, the client went away), a refused
    /// one and trouble on this machine (keyring, configuration) do not: only outcomes at the authorization server.
    public static func counts(_ code: AuthError.Code) -> Bool {
        switch code {
        case .accessDenied, .loginFailed, .loginTimeout, .invalidIDToken, .invalidClient, .invalidTokenResponse: return true
        default: return false
        }
    }
}
