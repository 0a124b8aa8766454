import Synchronization

/// The one way a redirect sign-in's responses reach its wait, whether the listener received them (on a NIO thread)
/// or a person pasted one: each is judged against the session, made before the listener, and only the first genuine
/// one (a code, or an error with the right state) is passed on; later ones are refused.
final class RedirectResponses: Sendable {
    let session: LoginSession
    /// What ``TokenBroker/waitForCode(_:)`` reads: rejected responses (logged), then the one genuine one.
    let verdicts: AsyncStream<LoginSession.Verdict>
    private let continuation: AsyncStream<LoginSession.Verdict>.Continuation
    private let claimed = Atomic<Bool>(false)

    init(session: LoginSession) {
        self.session = session
        (verdicts, continuation) = AsyncStream<LoginSession.Verdict>.makeStream()
    }

    /// Passes `verdict` on; false for a genuine response when one came first (it is then not passed on).
    func accept(_ verdict: LoginSession.Verdict) -> Bool {
        switch verdict {
        case .rejected: break
        case .code, .denied:
            guard claimed.compareExchange(expected: false, desired: true, ordering: .relaxed).exchanged else { return false }
        }
        continuation.yield(verdict)
        return true
    }

    /// The listener's judge: the page for a request on the redirect path with this query.
    func page(query: String?) -> RedirectPage {
        let verdict = session.judge(query: query)
        guard accept(verdict) else { return .invalid }
        switch verdict {
        case .code: return .success
        case .denied: return .denied
        case .rejected: return .invalid
        }
    }
}
