import Glibc

/// An owned pidfd (`SO_PEERPIDFD`), closed when the last reference goes away. Held only while a caller is being
/// identified: keeping one per connection would double the agent's descriptors under a connection flood.
public final class ProcessFD: Sendable {
    public let fd: Int32
    public init(fd: Int32) { self.fd = fd }
    deinit { close(fd) }

    /// The process still runs: a pidfd becomes readable when its process exits, whatever happens to the pid later.
    /// Nil when the kernel cannot say.
    public var isRunning: Bool? {
        var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        let r = poll(&poller, 1, 0)
        return r < 0 ? nil : r == 0
    }
}
