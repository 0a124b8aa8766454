import AuthCore
import ServiceLifecycle

/// Keeps recently used accounts' access tokens fresh ahead of expiry, so steady-state callers never wait for a
/// refresh. Stops on graceful shutdown.
public struct ProactiveRefreshService: Service {
    let broker: TokenBroker

    public init(broker: TokenBroker) { self.broker = broker }

    public func run() async throws {
        await cancelWhenGracefulShutdown {
            await broker.runProactiveRefresh()
        }
    }
}
