import Logging

/// The sign-in rate limit (``LoginRateLimit``) applied per account.
extension TokenBroker {
    /// Throws `login_rate_limited` (with `retryAfter`) while the account's recent failures forbid a new sign-in.
    func checkLoginRateLimit(_ name: String) throws(AuthError) {
        let failures = accounts[name]?.signInFailures ?? []
        guard let wait = loginLimit.wait(failures: failures, now: time.now()) else { return }
        var seconds = Int(wait.components.seconds)
        if wait.components.attoseconds > 0 { seconds += 1 }
        logger.notice("sign-in refused: too many recent failures", metadata: ["account": "\(name)", "retry_in_s": "\(seconds)"])
        throw AuthError(.loginRateLimited,
            "\(failures.count) sign-ins of '\(name)' failed recently; the next one may start in \(seconds) s",
            retryAfter: seconds)
    }

    func noteSignInFailure(_ name: String, _ error: AuthError) {
        guard LoginRateLimit.counts(error.code), var failures = accounts[name]?.signInFailures else { return }
        failures.append(time.now())
        accounts[name]?.signInFailures = Array(failures.suffix(16))
    }
}
