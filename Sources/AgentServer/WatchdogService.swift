import AuthCore
import Logging
import NIOCore
import NIOPosix
import ServiceLifecycle

/// Pings systemd's watchdog (`WatchdogSec=`) at half the interval, but only after proving the agent can still do
/// work: a task must run on the NIO event loop (which serves the socket) and hop through the broker actor (which
/// serves tokens), each within half the interval. A wedged agent therefore stops pinging and systemd restarts it.
public struct WatchdogService: Service {
    let interval: Duration
    let broker: TokenBroker
    let ping: @Sendable () -> Void
    let logger: Logger

    public init(interval: Duration, broker: TokenBroker, logger: Logger, ping: @escaping @Sendable () -> Void) {
        self.interval = interval
        self.broker = broker
        self.logger = logger
        self.ping = ping
    }

    public func run() async throws {
        let half = interval / 2
        let broker = self.broker
        await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                let healthy = await WatchdogService.probe(within: half) {
                    try? await MultiThreadedEventLoopGroup.singleton.any().submit {}.get()
                    _ = await broker.accountNames
                }
                if healthy {
                    ping()
                } else {
                    logger.error("the agent did not answer its own health probe; not pinging the watchdog")
                }
                do { try await Task.sleep(for: half) } catch { return }
            }
        }
    }

    /// True if `body` finishes within `limit`.
    static func probe(within limit: Duration, _ body: @escaping @Sendable () async -> Void) async -> Bool {
        await withTaskGroup(of: Bool.self) { group in
            group.addTask {
                await body()
                return true
            }
            group.addTask {
                try? await Task.sleep(for: limit)
                return false
            }
            let first = await group.next() ?? false
            group.cancelAll()
            return first
        }
    }
}
