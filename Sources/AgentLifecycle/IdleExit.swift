import AgentRuntime
import AgentAccess
import AuthCore
import FoundationEssentials
import Synchronization
import Logging
import ServiceLifecycle

/// When a socket-activated agent may exit. Pure: tested on any instants without sleeping.
public enum IdlePolicy {
    /// nil: exit now. Otherwise how long to wait before asking again. Busy (a client connected, a D-Bus call, a
    /// sign-in pending or a refresh running) restarts the idle period. `holding`: a sign-in lives in memory only
    /// (no Secret Service), which an exit would lose, so the agent stays and asks again now and then (the sign-in
    /// may move to a Secret Service that appears, or be signed out).
    public static func wait(now: ContinuousClock.Instant, lastActive: ContinuousClock.Instant, busy: Bool,
                            holding: Bool = false, timeout: Duration) -> Duration? {
        if busy { return min(timeout, .seconds(5)) }
        let idle = now - lastActive
        if idle < timeout { return timeout - idle }
        return holding ? min(timeout, .seconds(30)) : nil
    }
}

/// Ends the agent (gracefully) after ``timeout`` with nothing to do; only used when systemd passed the socket, so
/// the next connection starts it again. Run it with `successTerminationBehavior: .gracefullyShutdownGroup`.
public struct IdleExitService: Service {
    let timeout: Duration
    let activity: ActivityTracker
    let broker: TokenBroker
    let logger: Logger
    /// While any grant lasts the agent stays: its socket is served by this process only (systemd does not hold it).
    let grants: Grants?

    public init(timeout: Duration, activity: ActivityTracker, broker: TokenBroker, grants: Grants? = nil, logger: Logger) {
        self.timeout = timeout
        self.activity = activity
        self.broker = broker
        self.grants = grants
        self.logger = logger
    }

    public func run() async throws {
        await cancelWhenGracefulShutdown {
            var heldBack = false
            while true {
                let (active, lastActive) = activity.snapshot
                let brokerBusy = await broker.isBusy
                let busy = active > 0 || brokerBusy
                let inMemory = await broker.holdsSignInsInMemory
                let granting = !(grants?.isEmpty ?? true)
                let holding = inMemory || granting
                let now = ContinuousClock.now
                if busy { activity.touch(now: now) }
                guard let wait = IdlePolicy.wait(now: now, lastActive: lastActive, busy: busy, holding: holding,
                                                 timeout: timeout) else {
                    logger.info("idle; exiting until the next connection starts the agent again",
                                metadata: ["idle_exit_s": "\(timeout.components.seconds)"])
                    return
                }
                // Said once each time a memory-only sign-in is what keeps an idle agent up.
                let idle = !busy && now - lastActive >= timeout
                if idle && holding && !heldBack {
                    logger.notice(inMemory ? "idle, but a sign-in lives in memory only (no Secret Service); not exiting, which would lose it"
                                           : "idle, but grants are served; not exiting, which would close their sockets until the agent starts again")
                }
                heldBack = idle && holding
                do { try await Task.sleep(for: wait) } catch { return }
            }
        }
    }
}
