import AgentService
#if canImport(Glibc)
import Glibc
#endif
import CAgentSocket
import Synchronization

/// The listening socket the ``AcceptLoop``s share. Each loop watches it with `EPOLLEXCLUSIVE` (a new connection wakes
/// one loop, not all); it is closed once the last loop has stopped watching it, and then the acceptor learns that
/// accepting has ended.
final class ListeningSocket: Sendable {
    let fd: Int32
    private let watching: Atomic<Int>
    /// The number of the last accepted connection (``accept()``).
    private let acceptOrder = Mutex<UInt64>(0)
    /// Until every loop has stopped (then dropped, which ends the loops' references back to this).
    private let loops = Mutex<[AcceptLoop]>([])
    private let whenClosed: @Sendable () -> Void

    /// Takes ownership of `fd` (bound and listening; made non-blocking here), for `loops` accept loops.
    init(fd: Int32, loops: Int, whenClosed: @escaping @Sendable () -> Void) throws(ServerError) {
        let flags = fcntl(fd, F_GETFL)
        guard flags >= 0, fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0 else {
            throw ServerError(.socket, "cannot make the listening socket non-blocking: \(String(cString: strerror(errno)))")
        }
        // Every message then carries its sender's pid, checked against the connecting process (AcceptLoop.serve).
        guard aa_socket_pass_credentials(fd) == 0 else {
            throw ServerError(.socket, "cannot ask for the senders of messages (SO_PASSCRED): \(String(cString: strerror(errno)))")
        }
        self.fd = fd
        self.watching = Atomic(loops)
        self.whenClosed = whenClosed
    }

    func add(_ loop: AcceptLoop) { loops.withLock { $0.append(loop) } }

    /// Accepts one connection and numbers it in the order the kernel's queue gave it out, across all loops (the
    /// number is taken under the same lock as the `accept4`). The queue is first in, first out, so a connection
    /// with a lower number was made no later than one with a higher number: ``CallerCache`` relies on it.
    /// Returns the descriptor (or -1), the number, and `errno` of a failed accept.
    func accept() -> (fd: Int32, accepted: UInt64, error: Int32) {
        acceptOrder.withLock { last in
            let accepted = aa_socket_accept(fd)
            guard accepted >= 0 else { return (accepted, 0, errno) }
            last += 1
            return (accepted, last, 0)
        }
    }

    private var all: [AcceptLoop] { loops.withLock { $0 } }

    /// Every loop stops accepting; the socket closes once all have.
    func stopAccepting() { for loop in all { loop.stopAccepting() } }

    /// The gate's count fell under its ceiling: every paused loop may accept again.
    func resumeAccepting() { for loop in all { loop.resumeAccepting() } }

    /// Called by each loop, on its thread, once it no longer watches the socket.
    func loopStopped() {
        guard watching.subtract(1, ordering: .acquiringAndReleasing).newValue == 0 else { return }
        close(fd)
        loops.withLock { $0.removeAll() }
        whenClosed()
    }
}
