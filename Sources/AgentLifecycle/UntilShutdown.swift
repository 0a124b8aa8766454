import ServiceLifecycle

/// Work that runs until the service group's graceful shutdown, as one of its services, so that what it serves needs
/// no lifecycle library of its own: the socket server (which `onShutdown` tells to drain), and the broker's own
/// loops (cancelled): the proactive refresh, the sign-in lifetime watch, the keyring's changes.
public struct UntilShutdown: Service {
    let work: @Sendable () async -> Void
    let onShutdown: (@Sendable () -> Void)?

    public init(_ work: @escaping @Sendable () async -> Void, onShutdown: (@Sendable () -> Void)? = nil) {
        (self.work, self.onShutdown) = (work, onShutdown)
    }

    public func run() async throws {
        guard let onShutdown else { return await cancelWhenGracefulShutdown { await work() } }
        await withGracefulShutdownHandler { await work() } onGracefulShutdown: { onShutdown() }
    }
}
