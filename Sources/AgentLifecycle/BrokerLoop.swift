import ServiceLifecycle

/// One of the broker's own loops, run by the service group until its graceful shutdown: the proactive refresh
/// (`runProactiveRefresh`), the sign-in lifetime watch (`runSignInLifetimeWatch`), and the keyring's changes
/// (`followSecretService`).
public struct BrokerLoop: Service {
    let loop: @Sendable () async -> Void

    public init(_ loop: @escaping @Sendable () async -> Void) { self.loop = loop }

    public func run() async throws {
        await cancelWhenGracefulShutdown { await loop() }
    }
}
