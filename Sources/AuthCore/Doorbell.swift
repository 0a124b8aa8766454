import FoundationEssentials
import Synchronization

/// Wakes one sleeping loop early: ``ring()`` from anywhere, ``wait()`` returns at the next ring (at once if one came
/// while nobody waited). Used by the proactive refresh loop, whose sleep was computed before a new token arrived.
final class Doorbell: @unchecked Sendable {
    private let lock = Mutex(())
    private var rung = false
    private var waiter: CheckedContinuation<Void, Never>?

    func ring() {
        let waiting = lock.withLock { _ -> CheckedContinuation<Void, Never>? in
            if let waiter {
                self.waiter = nil
                return waiter
            }
            rung = true
            return nil
        }
        waiting?.resume()
    }

    func wait() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let now = lock.withLock { _ -> Bool in
                if rung {
                    rung = false
                    return true
                }
                waiter = continuation
                return false
            }
            if now { continuation.resume() }
        }
    }

    /// Sleeps for `duration` on `time` or until a ring, whichever comes first; false when the task was cancelled.
    func sleep(for duration: Duration, on time: any TimeSource) async -> Bool {
        enum End { case slept, cancelled, rung }
        let end = await withTaskGroup(of: End.self) { group in
            group.addTask { (try? await time.sleep(for: duration)) != nil ? .slept : .cancelled }
            group.addTask {
                await self.wait()
                return .rung
            }
            let first = await group.next() ?? .cancelled
            group.cancelAll()
            // The waiter ignores cancellation: release it when the sleep ended first. That ring is consumed by
            // this waiter, so no spare ring is left for the next sleep.
            if first != .rung { ring() }
            return first
        }
        return end != .cancelled && !Task.isCancelled
    }
}
