import FoundationEssentials
import Synchronization
import NIOCore

/// The connections one redirect listener has accepted: at most `limit` at a time, and all closed with the listener.
///
/// Which connection to drop when full: the oldest. A browser sends its redirect within milliseconds of connecting,
/// so the connection that has been open longest without finishing a request is the one most likely to be a local
/// client holding a slot on purpose; refusing the newest instead would let such a client lock the browser out.
/// A flood of new connections can still evict the browser's before it has sent its request only by opening `limit`
/// connections in those milliseconds, and the browser's retry (or the user's reload) then gets through.
final class RedirectConnections: @unchecked Sendable {
    let limit: Int
    private let lock = Mutex(())
    /// In the order accepted (oldest first); at most `limit + 1` entries, so linear scans are cheap.
    private var open: [(id: ObjectIdentifier, channel: any Channel)] = []
    private var closed = false

    init(limit: Int) { self.limit = limit }

    /// Registers a newly accepted connection. Closes the oldest one if that makes more than `limit`, or the new one
    /// if the listener has already closed. Returns the number of connections that were closed to make room (0 or 1).
    @discardableResult
    func admit(_ channel: any Channel) -> Int {
        let id = ObjectIdentifier(channel)
        let (refused, evicted): (Bool, (any Channel)?) = lock.withLock { _ in
            if closed { return (true, nil) }
            open.append((id, channel))
            return (false, open.count > limit ? open.removeFirst().channel : nil)
        }
        if refused {
            channel.close(promise: nil)
            return 0
        }
        channel.closeFuture.whenComplete { [weak self] _ in self?.forget(id) }
        evicted?.close(promise: nil)
        return evicted == nil ? 0 : 1
    }

    /// The number of connections open now.
    var count: Int { lock.withLock { _ in open.count } }

    /// Closes every connection and refuses later ones (a connection accepted while the listener is closing).
    /// Each close runs on the connection's own event loop after anything already queued there, so a success page
    /// being written when the sign-in completes is flushed before its connection goes.
    func closeAll() {
        let all: [any Channel] = lock.withLock { _ in
            closed = true
            defer { open.removeAll() }
            return open.map(\.channel)
        }
        for channel in all { channel.eventLoop.execute { channel.close(promise: nil) } }
    }

    private func forget(_ id: ObjectIdentifier) {
        lock.withLock { _ in open.removeAll { $0.id == id } }
    }
}
