#if canImport(Glibc)
import Glibc
#endif
import CAgentSocket

/// An owned pidfd (`SO_PEERPIDFD`), closed when the last reference goes away. Held only while a caller is being
/// identified: keeping one per connection would double the agent's descriptors under a connection flood.
public final class ProcessFD: Sendable {
    public let fd: Int32
    public init(fd: Int32) { self.fd = fd }
    deinit { close(fd) }

    /// A pidfd for process `pid` (`pidfd_open`), or nil.
    public static func open(pid: Int32) -> ProcessFD? {
        let fd = aa_socket_pidfd_open(pid)
        return fd >= 0 ? ProcessFD(fd: fd) : nil
    }

    /// The process's id for the life of the system (its pidfs inode, Linux 6.9+): another process never has the
    /// same one, unlike a pid. Nil on older kernels.
    public var processID: UInt64? {
        var id: UInt64 = 0
        return aa_socket_pidfd_process_id(fd, &id) == 0 ? id : nil
    }

    /// The process still runs: a pidfd becomes readable when its process exits, whatever happens to the pid later.
    /// Nil when the kernel cannot say.
    public var isRunning: Bool? {
        var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        let r = poll(&poller, 1, 0)
        return r < 0 ? nil : r == 0
    }
}

/// A process's `/proc/PID` directory, held open (`O_PATH`). Like a pidfd it names the process that had the pid when
/// it was opened, not whoever has the pid later: once that process has exited, nothing can be looked up under it.
/// ``CallerCache`` keeps one per pinned process (bounded by ``CallerCache/pinCapacity``); closed when the last
/// reference goes away. Two calls, each one lookup of `exe` under it and no walk from `/proc`, prove that the process
/// still runs and what it runs: ``executable`` (the file) and ``reads(_:)`` (the kernel's name for it).
final class ProcessDirectory: Sendable {
    let fd: Int32
    private init(fd: Int32) { self.fd = fd }
    deinit { close(fd) }

    /// `/proc/PID` of the process that has `pid` now, or nil.
    static func open(pid: Int32) -> ProcessDirectory? {
        let fd = aa_socket_proc_dir_open(pid)
        return fd >= 0 ? ProcessDirectory(fd: fd) : nil
    }

    /// The device and inode of the file the process runs now (`exe`, followed; cached attributes); nil once the
    /// process has exited.
    var executable: FileID? { FileID(runningIn: self) }

    /// Whether the kernel's name for the file the process runs is `link`, byte for byte; nil once the process has
    /// exited (or while it exits).
    func reads(_ link: [UInt8]) -> Bool? {
        withUnsafeTemporaryAllocation(byteCount: 4096, alignment: 1) { buffer -> Bool? in
            let count = aa_socket_proc_exe_read(fd, buffer.baseAddress?.assumingMemoryBound(to: CChar.self),
                                                UInt(buffer.count))
            guard count >= 0 else { return nil }
            // A name as long as the buffer may have been cut short: not a match, whatever it starts with.
            guard count > 0, count < buffer.count, count == link.count, let read = buffer.baseAddress else { return false }
            return link.withUnsafeBytes { memcmp($0.baseAddress!, read, count) == 0 }
        }
    }

    /// The process still runs (its `exe` link can be read).
    var isRunning: Bool {
        var byte: CChar = 0
        return aa_socket_proc_exe_read(fd, &byte, 1) >= 0
    }
}

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
        Caller.readText("/proc/\(pid)/stat").flatMap(ProcFS.startTime(stat:)) == startTime
    }
}
