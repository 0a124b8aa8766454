import Foundation

/// RFC 8628 §3.4-3.5 polling as a pure state machine: it says how long to wait before each token request and
/// what a reply means, and does no I/O, so the intervals and `slow_down` are tested step by step on a manual clock.
public struct DevicePolling: Sendable, Equatable {
    /// RFC 8628 §3.2: the interval when the server gives none.
    public static let defaultInterval: Duration = .seconds(5)
    /// RFC 8628 §3.5: `slow_down` adds 5 s to the interval, for this and every later request.
    public static let slowDownIncrement: Duration = .seconds(5)

    /// What one token request amounted to.
    public enum Reply: Sendable, Equatable {
        case pending
        case slowDown
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
            return wait(now: now)
        case .slowDown:
            interval += DevicePolling.slowDownIncrement
            return wait(now: now)
        case .failed(let error):
            return .stop(error)
        }
    }

    private func wait(now: ContinuousClock.Instant) -> Step {
        guard now + interval < deadline else { return .stop(DevicePolling.expired) }
        return .poll(after: interval)
    }

    static let expired = AuthError(.loginTimeout, "the device code expired before the sign-in was approved")

    /// Classifies a token endpoint reply that is not a success (RFC 8628 §3.5).
    public static func classify(_ reply: HTTPReply) -> Reply {
        let object = (try? JSONSerialization.jsonObject(with: Data(reply.body))) as? [String: Any]
        let code = object?["error"] as? String
        switch code {
        case "authorization_pending" where reply.status < 500: return .pending
        case "slow_down" where reply.status < 500: return .slowDown
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
                switch try await request() {
                case .tokens(let tokens): return tokens
                case .notYet(let reply): step = machine.next(after: classify(reply), now: now())
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
