import AgentAccess
import AuthCore
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Synchronization
import Logging
import ServiceLifecycle

/// When a socket-activated agent may exit. Pure: tested on any instants without sleeping.
public enum IdlePolicy {
    /// nil: exit now. Otherwise how long to wait before asking again. Busy (a client connected, a D-Bus call, a
    /// sign-in pending or a refresh running) restarts the idle period.
    public static func wait(now: ContinuousClock.Instant, lastActive: ContinuousClock.Instant, busy: Bool,
                            timeout: Duration) -> Duration? {
        if busy { return min(timeout, .seconds(5)) }
        let idle = now - lastActive
        return idle >= timeout ? nil : timeout - idle
    }
}

/// Ends the agent (gracefully) after ``timeout`` with nothing to do; only used when systemd passed the socket, so
/// the next connection starts it again. Run it with `successTerminationBehavior: .gracefullyShutdownGroup`.
public struct IdleExitService: Service {
    let timeout: Duration
    let activity: ActivityTracker
    let broker: TokenBroker
    let logger: Logger

    public init(timeout: Duration, activity: ActivityTracker, broker: TokenBroker, logger: Logger) {
        self.timeout = timeout
        self.activity = activity
        self.broker = broker
        self.logger = logger
    }

    public func run() async throws {
        await cancelWhenGracefulShutdown {
            while true {
                let (active, lastActive) = activity.snapshot
                let brokerBusy = await broker.isBusy
                let busy = active > 0 || brokerBusy
                let now = ContinuousClock.now
                if busy { activity.touch(now: now) }
                guard let wait = IdlePolicy.wait(now: now, lastActive: lastActive, busy: busy, timeout: timeout) else {
                    logger.info("idle; exiting until the next connection starts the agent again",
                                metadata: ["idle_exit_s": "\(timeout.components.seconds)"])
                    return
                }
                do { try await Task.sleep(for: wait) } catch { return }
            }
        }
    }
}
