import CAgentBus
import CAgentLoop
import FoundationEssentials
import Synchronization
import Glibc

/// The one thread that owns an sd-bus connection. sd-bus is not thread-safe, so every call on the bus, and on
/// messages that belong to it, happens on this thread: other threads hand work over with ``submit(_:)``, which
/// queues a closure and wakes the thread through an eventfd (`aa_loop_wakeup_*`, as the accept loop does). The thread
/// polls the bus fd (with sd-bus's own events and timeout) and the eventfd, dispatches incoming messages with
/// `sd_bus_process`, and runs queued work.
final class BusLoop: @unchecked Sendable {
    /// How the loop ended.
    enum End: Equatable {
        /// ``stop()`` was called and every queued job ran.
        case stopped
        /// The bus failed (the daemon went away): the negative errno from sd-bus.
        case failed(Int32)
    }

    private let lock = Mutex(())
    private var jobs: [@Sendable (OpaquePointer) -> Void] = []
    private var stopRequested = false
    /// No loop runs (any more): the bus is gone or never came. Jobs are then dropped, not queued for nobody.
    private var ended = false
    private let wakeFD: Int32

    init() {
        wakeFD = aa_loop_wakeup_create()
    }

    deinit {
        if wakeFD >= 0 { close(wakeFD) }
    }

    /// Runs `job` on the bus thread with the bus. Callable from any thread; jobs run in order. Jobs submitted after
    /// the loop ended (``end()``) never run and are not kept.
    func submit(_ job: @escaping @Sendable (OpaquePointer) -> Void) {
        lock.withLock { _ in if !ended { jobs.append(job) } }
        wake()
    }

    /// No loop will run: what is queued is dropped, and so is every later job (an agent without a session bus
    /// would otherwise keep a job for each of its events until it stops).
    func end() {
        lock.withLock { _ in
            ended = true
            jobs.removeAll()
        }
    }

    /// How many jobs wait to run (for tests).
    var queued: Int { lock.withLock { _ in jobs.count } }

    /// Asks the loop to end once the jobs queued so far have run (their replies are flushed before it returns).
    func stop() {
        lock.withLock { _ in stopRequested = true }
        wake()
    }

    private func wake() {
        _ = aa_loop_wakeup_signal(wakeFD)
    }

    /// Serves `bus` on the calling thread until ``stop()`` or a bus failure. The caller still owns `bus`.
    func run(_ bus: OpaquePointer) -> End {
        defer { end() }
        let busFD = sd_bus_get_fd(bus)
        guard busFD >= 0, wakeFD >= 0 else { return .failed(busFD < 0 ? busFD : -EBADF) }
        while true {
            while true {
                let r = sd_bus_process(bus, nil)
                if r < 0 { return .failed(r) }
                if r == 0 { break }
            }
            let (pending, stopping) = lock.withLock { _ -> ([@Sendable (OpaquePointer) -> Void], Bool) in
                defer { jobs.removeAll() }
                return (jobs, stopRequested)
            }
            for job in pending { job(bus) }
            if !pending.isEmpty { continue }
            if stopping {
                _ = sd_bus_flush(bus)
                return .stopped
            }
            let events = sd_bus_get_events(bus)
            if events < 0 { return .failed(events) }
            var deadline: UInt64 = 0
            _ = sd_bus_get_timeout(bus, &deadline)
            var fds = [pollfd(fd: busFD, events: Int16(events), revents: 0), pollfd(fd: wakeFD, events: Int16(POLLIN), revents: 0)]
            let r = poll(&fds, 2, BusLoop.pollTimeout(deadline: deadline, now: aa_loop_monotonic_ns() / 1000))
            if r < 0 && errno != EINTR { return .failed(-errno) }
            if fds[1].revents != 0 { aa_loop_wakeup_drain(wakeFD) }
        }
    }

    /// poll(2)'s timeout in milliseconds for sd-bus's absolute CLOCK_MONOTONIC deadline (`UINT64_MAX`: none).
    static func pollTimeout(deadline: UInt64, now: UInt64) -> Int32 {
        if deadline == UInt64.max { return -1 }
        if deadline <= now { return 0 }
        return Int32(clamping: (deadline - now + 999) / 1000)
    }
}
