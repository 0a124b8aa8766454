import AuthCore
import ServiceLifecycle

/// Watches when accounts' sign-ins end (TokenBroker+Lifetime.swift): warns ahead of the end and reports the end,
/// whether or not anybody uses the account. Stops on graceful shutdown.
public struct SignInLifetimeService: Service {
    let broker: TokenBroker

    public init(broker: TokenBroker) { self.broker = broker }

    public func run() async throws {
        await cancelWhenGracefulShutdown {
            await broker.runSignInLifetimeWatch()
        }
    }
}
