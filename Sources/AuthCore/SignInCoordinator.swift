import FoundationEssentials

/// One account's sign-in lifecycle as a pure state machine: whether a caller starts a sign-in, joins the pending one
/// or is refused by the rate limit (``LoginRateLimit``); when the last caller leaving cancels it; which sign-in a late
/// caller's ticket belongs to. It does no I/O, starts nothing and keeps no clock: each step takes the moment it
/// happens and returns the action its owner executes; it never calls its owner. ``TokenBroker``
/// (TokenBroker+SignIn.swift) is that owner; the tests drive the machine step by step (SignInCoordinatorTests).
///
/// `Flow` is the owner's handle of one running sign-in (the broker's start and completion tasks), made by the owner
/// when ``begin(now:)`` says `.start` and handed over with ``started(id:method:now:flow:)``. The machine only keeps it
/// and hands it back in its actions, so it needs nothing from it, and tests use any value.
///
/// ```
///    begin: .start, started                   end (signed in, failed, cancelled)
///   idle ───────────────▶ pending(waiters ≥ 1) ──────────────────────────────────▶ ended
///                          │ ▲  begin: .join (waiters + 1)                          │
///                          │ └── leave (waiters - 1; at 0: .cancel, ends shortly)   │ begin: .start
///                          └─────────────────────────────────────────────────────── pending(previous: ended)
/// ```
struct SignInCoordinator<Flow> {
    enum State {
        /// No sign-in has run for this account since it was configured.
        case idle
        /// A sign-in is under way. `previous` is the last one that ended, kept for callers that still hold its ticket.
        case pending(Pending, previous: Ended?)
        /// No sign-in is under way; this one ended last.
        case ended(Ended)
    }

    /// A sign-in under way.
    struct Pending {
        let id: UUID
        let method: LoginMethod
        let startedAt: ContinuousClock.Instant
        /// Callers between their `begin` and the end of their wait. The first caller counts.
        var waiters: Int
        /// The last waiter left and the flow was told to stop: it ends (as cancelled) as soon as it notices. A caller
        /// arriving before then joins it, and gets its cancellation, as the broker always did.
        var cancelled: Bool
        let flow: Flow
    }

    /// How a sign-in ended.
    enum Result: Equatable, Sendable {
        case signedIn
        case failed(AuthError.Code)
        /// The last waiter left, or the agent (logout, shutdown) stopped it.
        case cancelled

        init(_ code: AuthError.Code) { self = code == .loginCancelled ? .cancelled : .failed(code) }
    }

    /// A sign-in that ended; its flow holds the result for a caller whose ticket came from it.
    struct Ended {
        let id: UUID
        let result: Result
        let flow: Flow
    }

    private(set) var state: State = .idle
    /// When recent sign-ins failed at the authorization server (``LoginRateLimit/counts(_:)``), oldest first, at most
    /// ``failureMemory``; a successful sign-in clears them.
    private(set) var failures: [ContinuousClock.Instant] = []
    let limit: LoginRateLimit

    /// More failures than this never change the limit's answer (its pause is capped long before).
    static var failureMemory: Int { 16 }

    init(limit: LoginRateLimit = LoginRateLimit()) {
        self.limit = limit
    }

    // MARK: Queries

    /// The sign-in under way, if any.
    var pending: Pending? {
        guard case .pending(let pending, _) = state else { return nil }
        return pending
    }

    var isPending: Bool { pending != nil }

    // MARK: Steps

    enum BeginAction {
        /// No sign-in is pending and the rate limit lets one start: make its flow, hand it to
        /// ``started(id:method:now:flow:)`` and announce the sign-in; the caller is its first waiter.
        case start
        /// A sign-in is pending: the caller is one more waiter of it.
        case join(Pending)
        /// Too many recent failures: `failures` is how many are remembered, `retryAfter` how long until one may start.
        case refuse(failures: Int, retryAfter: Duration)
    }

    /// A caller wants a sign-in. It joins the pending one whatever method it asked for; otherwise the rate limit
    /// decides whether a new one starts.
    mutating func begin(now: ContinuousClock.Instant) -> BeginAction {
        if case .pending(var pending, let previous) = state {
            pending.waiters += 1
            state = .pending(pending, previous: previous)
            return .join(pending)
        }
        if let wait = limit.wait(failures: failures, now: now) {
            return .refuse(failures: failures.count, retryAfter: wait)
        }
        return .start
    }

    /// The owner started sign-in `id` with `flow`, as ``begin(now:)`` said: it is pending, with its caller waiting.
    /// A sign-in already pending is left as it is (the owner never starts two).
    mutating func started(id: UUID, method: LoginMethod, now: ContinuousClock.Instant, flow: Flow) -> Pending {
        if let pending { return pending }
        var previous: Ended?
        if case .ended(let ended) = state { previous = ended }
        let started = Pending(id: id, method: method, startedAt: now, waiters: 1, cancelled: false, flow: flow)
        state = .pending(started, previous: previous)
        return started
    }

    enum WaitAction {
        /// The ticket's sign-in is pending: wait for `flow`, and ``leave(id:)`` if the caller goes away.
        case wait(Flow)
        /// The ticket's sign-in ended before the caller came for its result: `flow` holds it.
        case collect(Flow)
        /// The ticket's sign-in is neither pending nor the last to end.
        case gone
    }

    /// A caller holding a ticket of sign-in `id` comes for its result.
    func wait(for id: UUID) -> WaitAction {
        switch state {
        case .pending(let pending, _) where pending.id == id: return .wait(pending.flow)
        case .pending(_, let previous?) where previous.id == id: return .collect(previous.flow)
        case .ended(let ended) where ended.id == id: return .collect(ended.flow)
        case .idle, .pending, .ended: return .gone
        }
    }

    enum LeaveAction {
        case none
        /// Nobody waits any more: stop `flow` (it then ends as cancelled through ``end(id:result:now:)``).
        case cancel(Flow)
    }

    /// A waiter of sign-in `id` went away (its task was cancelled, or the start it waited for failed).
    mutating func leave(id: UUID) -> LeaveAction {
        guard case .pending(var pending, let previous) = state, pending.id == id else { return .none }
        pending.waiters = max(0, pending.waiters - 1)
        let cancel = pending.waiters == 0 && !pending.cancelled
        if cancel { pending.cancelled = true }
        state = .pending(pending, previous: previous)
        return cancel ? .cancel(pending.flow) : .none
    }

    enum EndAction {
        case none
        /// Announce that the account's sign-in ended.
        case announce
    }

    /// Sign-in `id` ended with `result` at `now`. A failure at the authorization server counts towards the rate
    /// limit; a success clears the record.
    mutating func end(id: UUID, result: Result, now: ContinuousClock.Instant) -> EndAction {
        switch result {
        case .signedIn:
            failures = []
        case .failed(let code) where LoginRateLimit.counts(code):
            failures = Array((failures + [now]).suffix(Self.failureMemory))
        case .failed, .cancelled:
            break
        }
        guard case .pending(let pending, _) = state, pending.id == id else { return .none }
        state = .ended(Ended(id: id, result: result, flow: pending.flow))
        return .announce
    }
}

extension SignInCoordinator: Sendable where Flow: Sendable {}
extension SignInCoordinator.State: Sendable where Flow: Sendable {}
extension SignInCoordinator.Pending: Sendable where Flow: Sendable {}
extension SignInCoordinator.Ended: Sendable where Flow: Sendable {}
