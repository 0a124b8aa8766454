import AuthCore
import Logging
import ServiceLifecycle

/// A thread that serves clients and can prove it is turning, as the watchdog sees it: it answers a numbered probe when
/// it next runs (the socket server's accept loop; the composition root hands its two calls over, so the socket front
/// end needs nothing of this module).
public struct ProbedLoop: Sendable {
    /// Asks the loop to answer probe `number`.
    let probe: @Sendable (UInt64) -> Void
    /// The number of the last probe the loop answered.
    let answered: @Sendable () -> UInt64

    public init(probe: @escaping @Sendable (UInt64) -> Void, answered: @escaping @Sendable () -> UInt64) {
        self.probe = probe
        self.answered = answered
    }
}

/// Pings systemd's watchdog (`WatchdogSec=`) at half the interval, but only while the agent can still serve: the
/// accept loop, the one thread that serves every socket client, must have answered the probe posted half an interval
/// earlier, and a hop through the broker actor (which serves tokens) must finish within half the interval. A wedged
/// loop or broker therefore stops the pings, and systemd restarts the agent.
public struct WatchdogService: Service {
    let interval: Duration
    let broker: TokenBroker
    let server: ProbedLoop
    let ping: @Sendable () -> Void
    let logger: Logger

    public init(interval: Duration, broker: TokenBroker, server: ProbedLoop, logger: Logger,
                ping: @escaping @Sendable () -> Void) {
        self.interval = interval
        self.broker = broker
        self.server = server
        self.logger = logger
        self.ping = ping
    }

    public func run() async throws {
        let half = interval / 2
        let broker = self.broker
        await cancelWhenGracefulShutdown {
            var probe: UInt64 = 1
            server.probe(probe)
            while !Task.isCancelled {
                do { try await Task.sleep(for: half) } catch { return }
                let loopTurning = server.answered() >= probe
                let brokerAnswers = await WatchdogService.probe(within: half) { _ = await broker.accountNames }
                if loopTurning && brokerAnswers {
                    ping()
                } else {
                    logger.error("the agent did not answer its own health probe; not pinging the watchdog", metadata: [
                        "accept_loop": "\(loopTurning ? "answered" : "stuck")",
                        "broker": "\(brokerAnswers ? "answered" : "stuck")"])
                }
                // A stuck loop never answers this one either: the pings stay off until systemd restarts the agent.
                if loopTurning {
                    probe += 1
                    server.probe(probe)
                }
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
