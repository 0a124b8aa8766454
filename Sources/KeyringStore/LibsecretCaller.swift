import CLibsecret
import Dispatch
import FoundationEssentials
import Synchronization

/// What one libsecret call produced: its return value (nil when the call gave up before it returned) and, if it
/// failed, the GError.
struct LibsecretOutcome<Value: Sendable>: Sendable {
    var value: Value?
    var failure: LibsecretFailure?
}

/// Runs blocking libsecret calls one at a time on a dedicated serial queue, never on the Swift concurrency pool,
/// and answers every call within `timeout`.
///
/// libsecret's `_sync` calls spin a private main loop until D-Bus answers; a stopped daemon or an unlock prompt
/// nobody answers would block for ~50 s. Each call gets a `GCancellable` that is cancelled at its deadline (or
/// when the calling task is cancelled), which ends the stuck call at once: the shim hands it to every D-Bus call
/// libsecret makes and gives up on a prompt itself (`aa_secret_wait_end`), so a call the Secret Service never
/// answers holds the queue, and every other account's keyring work, no longer than its deadline. One wait ignores
/// it (GDBus's `Hello` on a bus that never replies blocks for its own 25 s, and every call needs that bus), so the
/// caller is also answered at the deadline whether or not libsecret has returned; the stuck call finishes in the
/// background, and calls queued behind it whose deadline has passed are dropped without running.
struct LibsecretCaller: Sendable {
    let timeout: Duration
    private let queue: DispatchQueue

    init(timeout: Duration, label: String = "dev.auth-agent.libsecret") {
        self.timeout = timeout
        // Default QoS: on Linux libdispatch imitates a higher class by lowering the worker thread's nice value,
        // which an unprivileged user service may not do ("Failed to set thread priority ... errno=13" in the
        // journal on every start).
        self.queue = DispatchQueue(label: label)
    }

    /// Calls `body` on the queue with a fresh cancellable and an out-parameter for the GError, and copies any
    /// GError out before freeing it. `body` must return Swift values only (copy and free C memory inside it):
    /// its result is dropped if the deadline has already answered the caller.
    func call<Value: Sendable>(
        _ body: @escaping @Sendable (
            _ cancellable: UnsafeMutablePointer<GCancellable>?,
            _ error: UnsafeMutablePointer<UnsafeMutablePointer<GError>?>
        ) -> Value
    ) async -> LibsecretOutcome<Value> {
        let pending = PendingCall<Value>()
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<LibsecretOutcome<Value>, Never>) in
                pending.start(continuation)
                // The deadline counts from the call, not from when the queue gets to it: a call queued behind a
                // stuck one fails within `timeout` too. DispatchTime's clock stops during suspend, which is right
                // for bounding one D-Bus call.
                pending.scheduleDeadline(after: timeout)
                queue.async {
                    defer { pending.cancelDeadline() }
                    guard !pending.isFinished else { return }
                    var error: UnsafeMutablePointer<GError>?
                    let value = body(pending.cancellable, &error)
                    var failure: LibsecretFailure?
                    if let error {
                        failure = LibsecretFailure(error, deadlinePassed: pending.deadlinePassed)
                        aa_secret_error_free(error)
                    }
                    pending.finish(LibsecretOutcome(value: value, failure: failure))
                }
            }
        } onCancel: {
            pending.giveUp(deadlinePassed: false)
        }
    }
}

/// One call's cancellable and its continuation, which is resumed exactly once: by the result, the deadline or
/// the calling task's cancellation, whichever comes first.
private final class PendingCall<Value: Sendable>: @unchecked Sendable {
    /// Owned; `g_cancellable_cancel` is thread-safe.
    let cancellable: UnsafeMutablePointer<GCancellable>?
    private let lock = Mutex(())
    private var continuation: CheckedContinuation<LibsecretOutcome<Value>, Never>?
    private var finished = false
    private var cancelledEarly = false
    private var _deadlinePassed = false
    /// A timer source, not `asyncAfter`: a cancelled `asyncAfter` item still holds its timer, and what it captured,
    /// until its time comes, so a burst of calls (a `status` flood: four keyring calls each) kept megabytes alive for
    /// the whole timeout. A cancelled source is freed at once.
    private var deadline: (any DispatchSourceTimer)?

    init() { cancellable = g_cancellable_new() }
    deinit {
        deadline?.cancel()
        if let cancellable { g_object_unref(cancellable) }
    }

    var deadlinePassed: Bool { lock.withLock { _ in _deadlinePassed } }
    var isFinished: Bool { lock.withLock { _ in finished } }

    func start(_ continuation: CheckedContinuation<LibsecretOutcome<Value>, Never>) {
        let resumeNow = lock.withLock { _ -> Bool in
            if cancelledEarly { finished = true; return true }
            self.continuation = continuation
            return false
        }
        // The task was cancelled before the call began.
        if resumeNow { continuation.resume(returning: Self.gaveUp(deadlinePassed: false)) }
    }

    func scheduleDeadline(after timeout: Duration) {
        let timer = DispatchSource.makeTimerSource(queue: .global())
        timer.setEventHandler { [weak self] in self?.giveUp(deadlinePassed: true) }
        timer.schedule(deadline: .now() + timeout.dispatchInterval)
        lock.withLock { _ in deadline = timer }
        timer.activate()
    }

    /// Frees the timer once the call has returned (it would otherwise hold on for the whole timeout).
    func cancelDeadline() {
        let timer = lock.withLock { _ -> (any DispatchSourceTimer)? in
            defer { deadline = nil }
            return deadline
        }
        timer?.cancel()
    }

    func finish(_ outcome: LibsecretOutcome<Value>) {
        take()?.resume(returning: outcome)
    }

    func giveUp(deadlinePassed: Bool) {
        let continuation = lock.withLock { _ -> CheckedContinuation<LibsecretOutcome<Value>, Never>? in
            if deadlinePassed { _deadlinePassed = true }
            if self.continuation == nil && !finished { cancelledEarly = true }
            return takeLocked()
        }
        g_cancellable_cancel(cancellable)
        continuation?.resume(returning: Self.gaveUp(deadlinePassed: deadlinePassed))
    }

    private func take() -> CheckedContinuation<LibsecretOutcome<Value>, Never>? {
        lock.withLock { _ in takeLocked() }
    }

    private func takeLocked() -> CheckedContinuation<LibsecretOutcome<Value>, Never>? {
        guard !finished, let continuation else { return nil }
        finished = true
        self.continuation = nil
        return continuation
    }

    private static func gaveUp(deadlinePassed: Bool) -> LibsecretOutcome<Value> {
        LibsecretOutcome(value: nil, failure: LibsecretFailure(gaveUpAfterDeadline: deadlinePassed))
    }
}
