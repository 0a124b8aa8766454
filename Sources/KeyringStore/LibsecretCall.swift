import AuthCore
import CLibsecret
import Dispatch
import Foundation

/// A GError copied into Swift (kind and message) so the C error can be freed on the queue that made it.
struct LibsecretFailure: Sendable, Equatable {
    enum Kind: Sendable, Equatable {
        case cancelled, locked, noService, timedOut, other
    }
    var kind: Kind
    var message: String
    /// The call was cancelled because our deadline passed (not because the calling task was cancelled).
    var deadlinePassed: Bool

    init(_ error: UnsafeMutablePointer<GError>, deadlinePassed: Bool) {
        switch Int(aa_secret_error_kind(error)) {
        case AA_ERROR_CANCELLED: kind = .cancelled
        case AA_ERROR_LOCKED: kind = .locked
        case AA_ERROR_NO_SERVICE: kind = .noService
        case AA_ERROR_TIMED_OUT: kind = .timedOut
        default: kind = .other
        }
        message = aa_secret_error_message(error).map { String(cString: $0) } ?? ""
        self.deadlinePassed = deadlinePassed
    }
}

/// What one libsecret call produced: its return value and, if it set one, its GError.
struct LibsecretOutcome<Value: Sendable>: Sendable {
    var value: Value
    var failure: LibsecretFailure?
}

/// Runs blocking libsecret calls one at a time on a dedicated serial queue, never on the Swift concurrency pool,
/// each with a `GCancellable` that is cancelled when its deadline passes or its calling task is cancelled.
///
/// libsecret's `_sync` calls spin a private main loop until D-Bus answers; a stopped daemon or an unlock prompt
/// nobody answers would block a cooperative-pool thread for ~50 s without the cancellable.
struct LibsecretCaller: Sendable {
    let timeout: Duration
    private let queue: DispatchQueue

    init(timeout: Duration, label: String = "dev.auth-agent.libsecret") {
        self.timeout = timeout
        self.queue = DispatchQueue(label: label, qos: .userInitiated)
    }

    /// Calls `body` on the queue with a fresh cancellable and an out-parameter for the GError, and copies any
    /// GError out before freeing it. The deadline counts from the call, so a call queued behind a stuck one fails
    /// within `timeout` too instead of waiting for its turn and then for its own timeout.
    func call<Value: Sendable>(
        _ body: @escaping @Sendable (
            _ cancellable: UnsafeMutablePointer<GCancellable>?,
            _ error: UnsafeMutablePointer<UnsafeMutablePointer<GError>?>
        ) -> Value
    ) async -> LibsecretOutcome<Value> {
        let cancellable = CancellableBox()
        // DispatchTime's clock stops during suspend; for a bound on how long one D-Bus call may block, that is
        // the right clock (a call that spans a suspend gets its full time after resume).
        let deadline = DispatchWorkItem { cancellable.cancel(deadlinePassed: true) }
        DispatchQueue.global().asyncAfter(deadline: .now() + timeout.dispatchInterval, execute: deadline)
        defer { deadline.cancel() }

        return await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<LibsecretOutcome<Value>, Never>) in
                queue.async {
                    var error: UnsafeMutablePointer<GError>?
                    let value = body(cancellable.pointer, &error)
                    var failure: LibsecretFailure?
                    if let error {
                        failure = LibsecretFailure(error, deadlinePassed: cancellable.deadlinePassed)
                        aa_secret_error_free(error)
                    }
                    continuation.resume(returning: LibsecretOutcome(value: value, failure: failure))
                }
            }
        } onCancel: {
            cancellable.cancel(deadlinePassed: false)
        }
    }
}

/// Owns one `GCancellable`. `g_cancellable_cancel` is thread-safe; the flag says why it was cancelled.
private final class CancellableBox: @unchecked Sendable {
    let pointer: UnsafeMutablePointer<GCancellable>?
    private let lock = NSLock()
    private var _deadlinePassed = false

    init() { pointer = g_cancellable_new() }
    deinit { if let pointer { g_object_unref(pointer) } }

    var deadlinePassed: Bool { lock.withLock { _deadlinePassed } }

    func cancel(deadlinePassed: Bool) {
        lock.withLock { if deadlinePassed { _deadlinePassed = true } }
        g_cancellable_cancel(pointer)
    }
}

extension Duration {
    var dispatchInterval: DispatchTimeInterval {
        let (seconds, attoseconds) = components
        return .nanoseconds(Int(seconds) * 1_000_000_000 + Int(attoseconds / 1_000_000_000))
    }

    /// "25", "2.5": for "did not answer within N s".
    var secondsText: String {
        let (seconds, attoseconds) = components
        if attoseconds == 0 { return "\(seconds)" }
        return String(format: "%.1f", Double(seconds) + Double(attoseconds) / 1e18)
    }
}
