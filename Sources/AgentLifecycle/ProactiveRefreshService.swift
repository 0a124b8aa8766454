import AuthCore
import ServiceLifecycle

/// Keeps recently used accounts' access tokens fresh ahead of expiry, so steady-state callers never wait for a
/// refresh. `afterRound` runs after each of its rounds (which run when a token falls due; the socket server's idle
/// hook then hands what the round mapped back to the kernel). Stops on graceful shutdown.
public struct ProactiveRefreshService: Service {
    let broker: TokenBroker
    let afterRound: @Sendable () -> Void

    public init(broker: TokenBroker, afterRound: @escaping @Sendable () -> Void = {}) {
        self.broker = broker
        self.afterRound = afterRound
    }

    public func run() async throws {
        await cancelWhenGracefulShutdown {
            await broker.runProactiveRefresh(afterRound: afterRound)
        }
    }
}
