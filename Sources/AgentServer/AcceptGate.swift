import NIOCore
import Synchronization

/// Bounds the agent's client file descriptors, not just its registered connections (SECURITY.md 22). The
/// ``ConnectionRegistry`` makes room at its cap by closing the connection idle longest, but that close completes
/// later, on the victim's own event loop; accepted connections still being set up, and refused ones being closed,
/// hold descriptors too. Under a flood those in-between descriptors piled up (a CI run saw 4,553 open against a cap of
/// 4,096). This handler sits on the listening channel, counts every accepted connection until its close has
/// completed, and stops accepting (`autoRead` off) when ``ceiling`` are open; new clients then wait in the kernel's
/// listen backlog, which costs the agent nothing, and accepting resumes once the count is back under ``ceiling``.
final class AcceptGate: ChannelInboundHandler, Sendable {
    typealias InboundIn = any Channel
    typealias InboundOut = any Channel

    /// How many accepted connections may be open at once, however far each is between accept and close.
    let ceiling: Int
    /// Accepted connections whose close has not completed.
    let open = Atomic<Int>(0)
    /// The most that were ever open at once (tests and the bench read it).
    let peak = Atomic<Int>(0)
    /// How many times accepting was paused.
    let pauses = Atomic<Int>(0)
    /// Whether accepting is paused; written on the listening channel's event loop only.
    private let paused = Atomic<Bool>(false)
    var isPaused: Bool { paused.load(ordering: .relaxed) }

    /// Room above the registry's cap for connections being set up, refused or evicted.
    static let headroom = 64

    init(ceiling: Int) { self.ceiling = ceiling }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let child = unwrapInboundIn(data)
        let now = open.add(1, ordering: .relaxed).newValue
        _ = peak.max(now, ordering: .relaxed)
        let server = context.channel
        child.closeFuture.whenComplete { _ in
            let left = self.open.subtract(1, ordering: .relaxed).newValue
            if left < self.ceiling { server.eventLoop.execute { self.resume(server) } }
        }
        if now >= ceiling, !paused.load(ordering: .relaxed) {
            paused.store(true, ordering: .relaxed)
            pauses.add(1, ordering: .relaxed)
            server.setOption(ChannelOptions.autoRead, value: false).whenFailure { _ in }
        }
        context.fireChannelRead(data)
    }

    /// Runs on the listening channel's event loop. Turning `autoRead` back on also starts a read.
    private func resume(_ server: any Channel) {
        guard paused.load(ordering: .relaxed), open.load(ordering: .relaxed) < ceiling else { return }
        paused.store(false, ordering: .relaxed)
        server.setOption(ChannelOptions.autoRead, value: true).whenFailure { _ in }
    }
}
