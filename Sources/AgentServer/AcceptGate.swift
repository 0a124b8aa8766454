import Synchronization

/// Bounds the agent's client file descriptors, not just its registered connections (SECURITY.md 22). The
/// ``ConnectionRegistry`` makes room at its cap by closing the connection idle longest, but that close completes
/// later (on the victim's own thread); connections handed to NIO, and refused ones being closed, hold descriptors
/// too. Under a flood those in-between descriptors piled up (a CI run saw 4,553 open against a cap of 4,096). The
/// gate counts every accepted connection from accept until its descriptor is closed; at ``ceiling`` the
/// ``AcceptLoop`` stops accepting, so new clients wait in the kernel's listen backlog (which costs the agent
/// nothing), and accepting resumes once the count is back under ``ceiling``.
final class AcceptGate: Sendable {
    /// How many accepted connections may be open at once, however far each is between accept and close.
    let ceiling: Int
    /// Accepted connections whose descriptor is not closed yet.
    let open = Atomic<Int>(0)
    /// The most that were ever open at once (tests and the bench read it).
    let peak = Atomic<Int>(0)
    /// How many times accepting was paused.
    let pauses = Atomic<Int>(0)
    /// Whether accepting is paused (set by ``accepted()``, cleared by ``resume()``).
    private let paused = Atomic<Bool>(false)
    var isPaused: Bool { paused.load(ordering: .relaxed) }

    /// Room above the registry's cap for connections being set up, refused or evicted.
    static let headroom = 64

    init(ceiling: Int) { self.ceiling = ceiling }

    /// Takes a slot for the connection an accept loop is about to accept. False at the ceiling: accepting is
    /// paused then, and each loop stops accepting until ``closed()`` says to resume. Several loops take slots
    /// concurrently, so the count never passes the ceiling.
    func reserve() -> Bool {
        while true {
            var current = open.load(ordering: .sequentiallyConsistent)
            while current < ceiling {
                let (exchanged, original) = open.compareExchange(expected: current, desired: current + 1,
                                                                 ordering: .sequentiallyConsistent)
                if exchanged {
                    _ = peak.max(current + 1, ordering: .relaxed)
                    return true
                }
                current = original
            }
            if !paused.exchange(true, ordering: .sequentiallyConsistent) { pauses.add(1, ordering: .relaxed) }
            // A close that came between the count's check and the flag did not see the flag, so it will not ask to
            // resume: look at the count again (both sides are sequentially consistent, so one sees the other).
            guard open.load(ordering: .sequentiallyConsistent) < ceiling else { return false }
        }
    }

    /// Returns a slot ``reserve()`` took when there was nothing to accept after all. True when accepting is paused
    /// and may resume (as for ``closed()``).
    func unreserve() -> Bool { closed() }

    /// An accepted connection's descriptor was closed. True when accepting is paused and may resume: the caller
    /// then asks the accept loop to ``resume()``.
    func closed() -> Bool {
        let left = open.subtract(1, ordering: .sequentiallyConsistent).newValue
        return left < ceiling && paused.load(ordering: .sequentiallyConsistent)
    }

    /// Called by the accept loop (one thread) before it accepts again: false while still at the ceiling.
    func resume() -> Bool {
        guard paused.load(ordering: .relaxed) else { return true }
        guard open.load(ordering: .relaxed) < ceiling else { return false }
        paused.store(false, ordering: .relaxed)
        return true
    }
}
