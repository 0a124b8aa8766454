#if canImport(Glibc)
import Glibc
#endif
import AuthCore
import CAgentSocket
import Synchronization

/// A file's device and inode (`statx`, following links): the same pair is the same file. The attributes are the
/// ones the kernel has cached (`AT_STATX_DONT_SYNC`), so a caller's FUSE server is not asked for them.
struct FileID: Equatable, Sendable {
    let device: UInt64
    let inode: UInt64

    init?(path: String) {
        self.init { aa_file_info_at(AT_FDCWD, path, 0, &$0) }
    }

    /// The file process `pid` runs now (`/proc/PID/exe`, followed), without building the path as a Swift string.
    init?(runningOf pid: Int32) {
        self.init { aa_proc_exe_info(pid, &$0) }
    }

    /// The file the process whose `/proc/PID` `directory` holds runs now (`exe` under it, followed).
    init?(runningIn directory: ProcessDirectory) {
        self.init { aa_proc_dir_exe_info(directory.fd, &$0) }
    }

    /// What `read` (a C call: 0 on success) fills in.
    private init?(_ read: (inout aa_file_info) -> Int32) {
        var info = aa_file_info()
        guard read(&info) == 0 else { return nil }
        (device, inode) = (info.device, info.inode)
    }
}

/// What ``Caller/identify(peer:via:pidfd:cache:accepted:)`` derived for processes that connected before, so a process
/// that reconnects (a mail client, a script in a loop, the benchmark) is not read in full each time. Keyed by pid and
/// start time (one process) and checked against the executable's device and inode. Bounded: when full it starts
/// over, which costs only the reads it saves.
///
/// Up to ``pinCapacity`` entries also hold their process's `/proc/PID` directory open (a ``Pin``), with the place in the
/// listening socket's queue of the connection they were read for: a later connection from that pid is then
/// identified without a pidfd (``Caller/identifyPinned``). Those descriptors count against the agent's spare
/// files (``SocketServer/connectionLimit()``); entries of processes that have exited give theirs back at the next
/// ``sweep()`` (the socket server's idle hook) or when the pins run out.
public final class CallerCache: Sendable {
    struct Derived: Sendable {
        var exe: String?
        var exeDeleted: Bool
        var unit: String?
        var flatpakApp: String?
        var ownPIDNamespace = false
    }

    /// A process's `/proc/PID` directory, held, the queue position (the accept loop's number) of the connection whose
    /// identification opened it, and what was read then: the kernel's name for its executable (`link`) and whether
    /// that file was deleted or replaced.
    struct Pin: Sendable {
        let held: ProcessDirectory
        let accepted: UInt64
        /// `/proc/PID/exe`'s link text as read (the path, and " (deleted)" if the kernel said so).
        let link: [UInt8]
        /// The caller as that read identified it (identity, replaced-file verdict, start time, terminal).
        let caller: Caller
        /// The device and inode of the file the process ran then.
        let executable: FileID

        init(held: ProcessDirectory, accepted: UInt64, exe: String, exeDeletedAsRead: Bool, caller: Caller,
             executable: FileID) {
            self.held = held
            self.accepted = accepted
            self.executable = executable
            link = Array(exe.utf8) + (exeDeletedAsRead ? Array(" (deleted)".utf8) : [])
            self.caller = caller
        }
    }

    private struct Entry {
        let startTime: UInt64
        /// The pidfd's process id (pidfs) when the kernel has one.
        let processID: UInt64?
        let executable: FileID
        let derived: Derived
        let hasTerminal: Bool
        let pin: Pin?
    }

    private struct State {
        var entries: [Int32: Entry] = [:]
        var pins = 0
        /// When ``makeRoomForPin()`` last swept.
        var lastSweep: ContinuousClock.Instant?

        mutating func set(_ pid: Int32, _ entry: Entry?) {
            if entries[pid]?.pin != nil { pins -= 1 }
            entries[pid] = entry
            if entry?.pin != nil { pins += 1 }
        }

        mutating func removeAll() {
            entries.removeAll(keepingCapacity: true)
            pins = 0
        }
    }

    /// What a lookup by process id returns: also the start time and terminal, which the caller then need not read.
    struct Known {
        let derived: Derived
        let startTime: UInt64
        let hasTerminal: Bool
    }

    let capacity: Int
    /// At most this many entries hold a descriptor.
    let pinCapacity: Int
    private let state = Mutex(State())
    /// How many lookups were answered (tests and diagnostics).
    let hits = Atomic<Int>(0)
    /// How many connections were identified through a pin.
    let pinnedHits = Atomic<Int>(0)

    public init(capacity: Int = 256, pinCapacity: Int = 64) {
        self.capacity = capacity
        self.pinCapacity = min(pinCapacity, capacity)
    }

    var count: Int { state.withLock { $0.entries.count } }
    /// Entries holding a descriptor.
    var pinCount: Int { state.withLock { $0.pins } }
    /// A pin may be stored now (checked before opening a link that would only be closed again).
    var hasRoomForPin: Bool { state.withLock { $0.pins < pinCapacity } }

    /// At most one sweep this often when the pins have run out (a sweep reads every pinned link).
    static let sweepInterval: Duration = .seconds(1)

    /// ``hasRoomForPin``, after sweeping the pins of exited processes when there is none (at most once per
    /// ``sweepInterval``): a client that never lets the idle hook run must not keep them.
    func makeRoomForPin() -> Bool {
        let full = state.withLock { state -> Bool? in
            guard state.pins >= pinCapacity else { return nil }
            let now = ContinuousClock.now
            if let last = state.lastSweep, now - last < CallerCache.sweepInterval { return false }
            state.lastSweep = now
            return true
        }
        switch full {
        case nil: return true
        case false?: return false
        case true?: return sweep() > 0 && hasRoomForPin
        }
    }

    func lookup(pid: Int32, startTime: UInt64, executable: FileID) -> Derived? {
        state.withLock { state in
            guard let entry = state.entries[pid], entry.startTime == startTime, entry.executable == executable else { return nil }
            hits.add(1, ordering: .relaxed)
            return entry.derived
        }
    }

    /// By the pidfd's process id: the same process for certain, without reading its start time.
    func lookup(pid: Int32, processID: UInt64, executable: FileID) -> Known? {
        state.withLock { state in
            guard let entry = state.entries[pid], entry.processID == processID, entry.executable == executable else { return nil }
            hits.add(1, ordering: .relaxed)
            return Known(derived: entry.derived, startTime: entry.startTime, hasTerminal: entry.hasTerminal)
        }
    }

    /// The pinned entry for `pid`, if the connection it was read for left the listening socket's queue before the
    /// one at `accepted` (only then does the pin say anything about who made that connection).
    func pinned(pid: Int32, acceptedBefore accepted: UInt64) -> Pin? {
        state.withLock { state in
            guard let pin = state.entries[pid]?.pin, pin.accepted < accepted else { return nil }
            return pin
        }
    }

    /// The process behind `held` has exited: its entry goes (if it is still that one).
    func unpin(pid: Int32, _ held: ProcessDirectory) {
        state.withLock { state in
            guard state.entries[pid]?.pin?.held === held else { return }
            state.set(pid, nil)
        }
    }

    func store(pid: Int32, startTime: UInt64, processID: UInt64? = nil, executable: FileID, _ derived: Derived,
               hasTerminal: Bool = false, pin: Pin? = nil) {
        var pin = pin
        state.withLock { state in
            if state.entries.count >= capacity, state.entries[pid] == nil { state.removeAll() }
            // Another connection may have taken the last pin meanwhile: the entry is kept without one then.
            let replacesPin = state.entries[pid]?.pin != nil
            if pin != nil, !replacesPin, state.pins >= pinCapacity { pin = nil }
            state.set(pid, Entry(startTime: startTime, processID: processID, executable: executable, derived: derived,
                                 hasTerminal: hasTerminal, pin: pin))
        }
    }

    /// Forgets the pinned processes that have exited, closing their descriptors. Returns how many went.
    @discardableResult
    package func sweep() -> Int {
        let pinned = state.withLock { state in state.entries.compactMap { pid, entry in entry.pin.map { (pid, $0.held) } } }
        // Asked outside the lock: one `readlinkat` each.
        let gone = pinned.filter { !$0.1.isRunning }
        for (pid, held) in gone { unpin(pid: pid, held) }
        return gone.count
    }
}
