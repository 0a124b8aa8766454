import FoundationEssentials

/// RFC 8628 §3.4-3.5 polling as a pure state machine: it says how long to wait before each token request and
/// what a reply means, and does no I/O, so the intervals and `slow_down` are tested step by step on a manual clock.
///
/// RFC 8628 §3.5 stops polling on `access_denied`, `expired_token` and any other OAuth error, but a 5xx, a 429, a
/// timeout or a refused connection says nothing about the device code: the person may be approving it right now.
/// Those are retried with exponential backoff (never sooner than `interval` or `Retry-After`, never past
/// `expires_in`), so a server that restarts during a sign-in does not throw away a code the person already typed.
public struct DevicePolling: Sendable, Equatable {
    /// RFC 8628 §3.2: the interval when the server gives none.
    public static let defaultInterval: Duration = .seconds(5)
    /// RFC 8628 §3.5: `slow_down` adds 5 s to the interval, for this and every later request.
    public static let slowDownIncrement: Duration = .seconds(5)
    /// The longest wait between retries after transient failures (when `interval` is shorter).
    public static let maxBackoff: Duration = .seconds(60)

    /// What one token request amounted to.
    public enum Reply: Sendable, Equatable {
        case pending
        case slowDown
        /// A 5xx, 429, timeout or connection failure: the device code may still be good, so try again later.
        case transient(AuthError)
        case failed(AuthError)
    }

    /// What to do next.
    public enum Step: Sendable, Equatable {
        /// Wait this long, then send the next token request.
        case poll(after: Duration)
        /// Stop: the sign-in failed with this error.
        case stop(AuthError)
    }

    public private(set) var interval: Duration
    /// Transient failures in a row; the wait doubles with each and resets on any OAuth answer.
    public private(set) var transientFailures = 0
    /// When the device code expires; no request is sent after it.
    public let deadline: ContinuousClock.Instant

    public init(interval: Int?, expiresIn: Int, startedAt: ContinuousClock.Instant) {
        self.interval = interval.map { .seconds($0) } ?? DevicePolling.defaultInterval
        self.deadline = startedAt + .seconds(expiresIn)
    }

    /// The first request also waits one interval: the person cannot have approved before that.
    public func start(now: ContinuousClock.Instant) -> Step {
        wait(now: now)
    }

    /// The step after a token request that did not return tokens.
    public mutating func next(after reply: Reply, now: ContinuousClock.Instant) -> Step {
        switch reply {
        case .pending:
            transientFailures = 0
            return wait(now: now)
        case .slowDown:
            transientFailures = 0
            interval += DevicePolling.slowDownIncrement
            return wait(now: now)
        case .transient(let error):
            transientFailures += 1
            return backOff(after: error, now: now)
        case .failed(let error):
            return .stop(error)
        }
    }

    private func wait(now: ContinuousClock.Instant) -> Step {
        guard now + interval < deadline else { return .stop(DevicePolling.expired) }
        return .poll(after: interval)
    }

    /// interval × 2^(failures), at least 1 s so a zero interval still backs off, capped at ``maxBackoff`` (or the
    /// interval when that is longer), and never shorter than the server's `Retry-After`.
    private func backOff(after error: AuthError, now: ContinuousClock.Instant) -> Step {
        let base = max(interval, .seconds(1))
        let doubled = base * (1 << min(transientFailures, 16))
        var delay = min(doubled, max(DevicePolling.maxBackoff, interval))
        if let retryAfter = error.retryAfter { delay = max(delay, .seconds(retryAfter)) }
        guard now + delay < deadline else {
            return .stop(AuthError(error.code, "\(error.message); the device code expires before the next try"))
        }
        return .poll(after: delay)
    }

    static let expired = AuthError(.loginTimeout, "the device code expired before the sign-in was approved")

    /// Classifies a token endpoint reply that is not a success (RFC 8628 §3.5).
    public static func classify(_ reply: HTTPReply) -> Reply {
        // A body naming a member twice has no code here; TokenResponseParser.error(from:) says what is wrong with it.
        let code = (try? JSONValue.object(reply.body))??["error"]?.string
        if reply.status == 429 || reply.status >= 500 { return .transient(TokenResponseParser.error(from: reply)) }
        switch code {
        case "authorization_pending": return .pending
        case "slow_down": return .slowDown
        case "expired_token": return .failed(expired)
        case "access_denied": return .failed(AuthError(.accessDenied, "the sign-in was denied at the authorization server"))
        default:
            let error = TokenResponseParser.error(from: reply)
            // invalid_grant here means the device code is unknown or used, not that a stored sign-in died.
            if error.code == .loginRequired { return .failed(AuthError(.loginFailed, error.message)) }
            return .failed(error)
        }
    }

    /// Runs the polling loop over injected effects: `now` reads the clock, `sleep` waits, `request` sends one token
    /// request and returns tokens or the reply that was not a success. Production passes the broker's clock,
    /// `Task.sleep` and the HTTP transport; unit tests pass a manual clock whose `sleep` only advances it.
    public static func run<Tokens: Sendable>(
        isolation: isolated (any Actor)? = #isolation,
        _ machine: DevicePolling, now: () -> ContinuousClock.Instant,
        sleep: (Duration) async throws -> Void,
        request: () async throws(AuthError) -> Attempt<Tokens>
    ) async throws -> Tokens {
        var machine = machine
        var step = machine.start(now: now())
        while true {
            switch step {
            case .stop(let error):
                throw error
            case .poll(let wait):
                try await sleep(wait)
                let attempt: Result<Attempt<Tokens>, AuthError>
                do {
                    attempt = .success(try await request())
                } catch {
                    attempt = .failure(error)
                }
                switch attempt {
                case .success(.tokens(let tokens)):
                    return tokens
                case .success(.notYet(let reply)):
                    step = machine.next(after: classify(reply), now: now())
                case .failure(let error) where error.code == .serverUnreachable:
                    // A timeout or a refused connection (a TLS failure is not transient: it stops).
                    step = machine.next(after: .transient(error), now: now())
                case .failure(let error):
                    throw error
                }
            }
        }
    }

    /// One token request of the device grant: tokens, or the reply that was not a success.
    public enum Attempt<Tokens: Sendable>: Sendable {
        case tokens(Tokens)
        case notYet(HTTPReply)
    }
}
