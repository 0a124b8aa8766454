import ProcessTree

/// One process, pinned so that a later reuse of its pid cannot pass for it: the pid plus the process start time
/// (`/proc/PID/stat` field 22, clock ticks since boot). A recycled pid belongs to a process that started later.
public struct ProcessPin: Sendable, Equatable {
    public var pid: Int32
    public var startTime: UInt64

    public init(pid: Int32, startTime: UInt64) {
        self.pid = pid
        self.startTime = startTime
    }

    /// The pinned process still runs (a zombie counts until it is reaped).
    public var isAlive: Bool {
        ProcStat.read(pid: pid)?.startTime == startTime
    }
}
