import AgentAccess
import FoundationEssentials

/// Facts about the running agent that `status` reports.
public struct AgentInfo: Sendable {
    public var version: String
    public var pid: Int
    public var startedAt: ContinuousClock.Instant
    public var socketPath: String

    public init(version: String, pid: Int, startedAt: ContinuousClock.Instant, socketPath: String) {
        self.version = version
        self.pid = pid
        self.startedAt = startedAt
        self.socketPath = socketPath
    }
}
