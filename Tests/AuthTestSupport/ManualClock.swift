import AuthCore
import Foundation
import Synchronization

/// A clock tests move by hand: expiry logic and every timeout of the code under test run without real waiting.
/// A ``sleep(until:)`` returns when ``advance(_:)`` moves the clock to or past its deadline (or throws when its task
/// is cancelled), so a test of a 2 s timeout waits for the sleeper (``waitForSleepers(_:)``), advances 2 s, and is
/// done at once.
public final class ManualClock: TimeSource, Sendable {
    private struct Sleeper {
        let id: Int
        let deadline: ContinuousClock.Instant
        let continuation: CheckedContinuation<Void, any Error>
    }

    private struct State {
        var offset: Duration = .zero
        var sleepers: [Sleeper] = []
        var cancelledBeforeRegistering: Set<Int> = []
        var nextID = 0
    }

    private let state = Mutex(State())
    private let origin = ContinuousClock.now
    private let wallOrigin: Date

    /// `wallOrigin` is what ``wallClock()`` reads before the first advance (a fixed instant: tests compare it).
    public init(wallOrigin: Date = Date(timeIntervalSince1970: 1_800_000_000)) {
        self.wallOrigin = wallOrigin
    }

    public func now() -> ContinuousClock.Instant { origin + state.withLock { $0.offset } }

    public func wallClock() -> Date {
        let parts = state.withLock { $0.offset }.components
        return wallOrigin.addingTimeInterval(Double(parts.seconds) + Double(parts.attoseconds) / 1e18)
    }

    public func sleep(until deadline: ContinuousClock.Instant) async throws {
        let id = state.withLock { state in
            defer { state.nextID += 1 }
            return state.nextID
        }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                enum Now { case wait, due, cancelled }
                let now = state.withLock { state -> Now in
                    if state.cancelledBeforeRegistering.remove(id) != nil { return .cancelled }
                    if origin + state.offset >= deadline { return .due }
                    state.sleepers.append(Sleeper(id: id, deadline: deadline, continuation: continuation))
                    return .wait
                }
                switch now {
                case .wait: break
                case .due: continuation.resume()
                case .cancelled: continuation.resume(throwing: CancellationError())
                }
            }
        } onCancel: {
            let sleeper = state.withLock { state -> Sleeper? in
                guard let index = state.sleepers.firstIndex(where: { $0.id == id }) else {
                    state.cancelledBeforeRegistering.insert(id)
                    return nil
                }
                return state.sleepers.remove(at: index)
            }
            sleeper?.continuation.resume(throwing: CancellationError())
        }
    }

    /// Moves the clock and wakes every sleeper whose deadline it reached.
    public func advance(_ by: Duration) {
        let due = state.withLock { state -> [Sleeper] in
            state.offset += by
            let now = origin + state.offset
            let due = state.sleepers.filter { $0.deadline <= now }
            state.sleepers.removeAll { $0.deadline <= now }
            return due
        }
        for sleeper in due { sleeper.continuation.resume() }
    }

    /// How many tasks are sleeping on this clock now.
    public var sleepers: Int { state.withLock { $0.sleepers.count } }

    /// Returns once at least `count` tasks sleep on this clock (bounded: fails the wait after 10 s of real time,
    /// so a sleep that never comes fails the test instead of hanging it).
    @discardableResult
    public func waitForSleepers(_ count: Int = 1) async -> Bool {
        let limit = ContinuousClock.now + .seconds(10)
        while sleepers < count {
            if ContinuousClock.now > limit { return false }
            try? await Task.sleep(for: .milliseconds(1))
        }
        return true
    }
}
