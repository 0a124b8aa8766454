import AgentAccess
import FoundationEssentials
import Glibc

/// Facts about the running agent that `status` reports.
public struct AgentInfo: Sendable {
    public var version: String
    public var pid: Int
    public var startedAt: ContinuousClock.Instant
    public var socketPath: String
    /// The computer's host name, as `status` tells a forwarded host or an app whose agent answers; nil when unknown.
    public var hostname: String?

    public init(version: String, pid: Int, startedAt: ContinuousClock.Instant, socketPath: String, hostname: String? = nil) {
        self.hostname = hostname
        self.version = version
        self.pid = pid
        self.startedAt = startedAt
        self.socketPath = socketPath
    }

    /// This computer's host name (gethostname), nil when it has none.
    public static func hostname() -> String? {
        var buffer = [CChar](repeating: 0, count: 256)
        guard gethostname(&buffer, buffer.count - 1) == 0 else { return nil }
        let name = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return name.isEmpty ? nil : name
    }
}
