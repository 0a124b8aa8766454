#if canImport(Glibc)
import Glibc
#endif
import AuthCore
import Synchronization

/// Who asked: the peer's pid, uid and gid (`SO_PEERCRED` on the socket, the bus daemon's credentials on D-Bus),
/// which front end carried the request, and the identity derived from them by ``identify(peer:via:pidfd:)``
/// (executable, systemd unit, Flatpak app). Read by the agent once per connection, never taken from anything the
/// client sends.
public struct Caller: Sendable {
    public var pid: Int32
    public var uid: UInt32
    public var gid: UInt32
    public var via: String
    /// The peer's executable (`/proc/PID/exe`) without a " (deleted)" suffix; nil when it cannot be read.
    public var exe: String?
    /// What the access policy judges: executable (and whether it was deleted or replaced), unit, Flatpak app.
    public var identity: ClientIdentity
    /// The process that connected, pinned by its start time, so that each request can be checked against a
    /// recycled pid (``isStillConnectedProcess``).
    public var process: ProcessPin?
    /// The caller has a controlling terminal: `approve`, `deny` and `forget` are taken only from such callers (a
    /// person at a terminal running authctl), never from background programs.
    public var hasTerminal: Bool

    public init(pid: Int32, uid: UInt32, gid: UInt32 = 0, via: String, exe: String? = nil,
                identity: ClientIdentity? = nil, process: ProcessPin? = nil, hasTerminal: Bool = false) {
        self.pid = pid
        self.uid = uid
        self.gid = gid
        self.via = via
        self.exe = exe
        self.identity = identity ?? ClientIdentity(exe: exe)
        self.process = process
        self.hasTerminal = hasTerminal
    }

    /// True while the process that opened the connection (or sent the D-Bus call) still runs. A pid that was
    /// recycled by another process since then is not the same process: its start time differs. Without a pin
    /// (identity unavailable) false, so a policy fails closed.
    public var isStillConnectedProcess: Bool {
        process?.isAlive ?? false
    }

    /// The caller's identity from the kernel, computed once per connection. Synchronous and cheap (a few small
    /// `/proc` reads); runs on the connection's event loop, before its first request. `pidfd` is `SO_PEERPIDFD`'s
    /// descriptor when the kernel gave one: it proves that what was read under `/proc/PID` belonged to the process
    /// that connected, not to a later owner of its pid. The caller is then pinned by its start time.
    ///
    /// With a `cache`, a process that connected before (same pid and start time, so the same process) and still
    /// runs the same file (same device and inode behind `/proc/PID/exe`, so no `execve` of another binary since)
    /// reuses the executable path, unit and app read then; the start time, the terminal, whether the file at the path
    /// was replaced, and the pidfd are still read for every connection. A process that moved to another cgroup
    /// since its first connection keeps the unit it had then, for as long as it runs.
    public static func identify(peer: PeerCredentials, via: String, pidfd: ProcessFD? = nil,
                                cache: CallerCache? = nil) -> Caller {
        let pid = peer.pid
        guard pid > 0 else { return Caller(pid: pid, uid: peer.uid, gid: peer.gid, via: via) }
        let running = FileID(path: "/proc/\(pid)/exe")
        let processID = pidfd?.processID
        var started: UInt64?
        var terminal: Bool
        let derived: CallerCache.Derived
        var reused = false
        var reusedByID = false
        if let processID, let running, let known = cache?.lookup(pid: pid, processID: processID, executable: running) {
            // The pidfd names the very process that connected, and this process was read before: its start time and
            // terminal are the ones read then (the pidfd's check at the end vouches for the exe read above).
            (derived, started, terminal, reused, reusedByID) = (known.derived, known.startTime, known.hasTerminal, true, true)
        } else {
            // The start time is read first and checked last: everything read in between belongs to that process.
            let stat = readText("/proc/\(pid)/stat")
            started = stat.flatMap(ProcFS.startTime(stat:))
            terminal = (stat.flatMap(ProcFS.controllingTerminal(stat:)) ?? 0) != 0
            if let started, let running, let known = cache?.lookup(pid: pid, startTime: started, executable: running) {
                (derived, reused) = (known, true)
            } else {
                let link = Caller.executable(of: pid).map(ProcFS.executable(link:))
                let unit = readText("/proc/\(pid)/cgroup").flatMap(ProcFS.unit(cgroup:))
                let app = readText("/proc/\(pid)/root/.flatpak-info").flatMap(ProcFS.flatpakApp(info:))
                    ?? unit.flatMap(ProcFS.flatpakApp(unit:))
                derived = CallerCache.Derived(exe: link?.path, exeDeleted: link?.deleted ?? false, unit: unit, flatpakApp: app)
            }
        }
        // The file now at the path is not the one the process runs (replaced by a rename, e.g. an upgrade or an
        // attacker's copy): the path no longer names the running code.
        var deleted = derived.exeDeleted
        if let exe = derived.exe, !deleted, let running, FileID(path: exe) != running { deleted = true }
        let pin = started.map { ProcessPin(pid: pid, startTime: $0) }
        var caller = Caller(pid: pid, uid: peer.uid, gid: peer.gid, via: via, exe: derived.exe,
                            identity: ClientIdentity(exe: derived.exe, exeDeleted: deleted, unit: derived.unit,
                                                     flatpakApp: derived.flatpakApp),
                            process: pin, hasTerminal: terminal)
        // The process that connected died (its pid may be someone else's now) before or while we read: nothing
        // read can be trusted. The pidfd answers for the very process: still running means its pid was never
        // reused, so what was read under /proc/PID was its own. Without a pidfd, the start time read again answers
        // for whoever has the pid now.
        let stillTheSameProcess = switch pidfd?.isRunning {
        case true?: pin != nil
        case false?: false
        case nil: pin?.isAlive == true
        }
        if !stillTheSameProcess {
            caller.identity = ClientIdentity(exe: nil)
            caller.exe = nil
            caller.hasTerminal = false
        } else if let started, let running {
            // Also after a hit by start time when there is a process id now, so the next connection finds it by id.
            if !reused || (processID != nil && !reusedByID) {
                cache?.store(pid: pid, startTime: started, processID: processID, executable: running, derived,
                             hasTerminal: terminal)
            }
        }
        return caller
    }

    /// The executable of process `pid`, as the kernel names it (a replaced or deleted binary ends in " (deleted)").
    public static func executable(of pid: Int32) -> String? {
        guard pid > 0 else { return nil }
        var buffer = [CChar](repeating: 0, count: 4096)
        let count = readlink("/proc/\(pid)/exe", &buffer, buffer.count - 1)
        guard count > 0 else { return nil }
        return String(decoding: buffer[0..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// A small `/proc` file's text (at most 64 KiB), or nil.
    static func readText(_ path: String) -> String? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while bytes.count < 65536 {
            let n = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if n <= 0 { break }
            bytes.append(contentsOf: chunk[0..<n])
            // These files are generated whole on open (single_open): a short read is the end, no need to ask again.
            if n < chunk.count { break }
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}

/// A file's device and inode (`stat`, following links): the same pair is the same file.
struct FileID: Equatable, Sendable {
    let device: UInt64
    let inode: UInt64

    init?(path: String) {
        var info = stat()
        guard stat(path, &info) == 0 else { return nil }
        device = UInt64(info.st_dev)
        inode = UInt64(info.st_ino)
    }
}

/// What ``Caller/identify(peer:via:pidfd:cache:)`` derived for processes that connected before, so a process that
/// reconnects (a mail client, a script in a loop, the benchmark) is not read in full each time. Keyed by pid and
/// start time (one process) and checked against the executable's device and inode. Bounded: when full it starts
/// over, which costs only the reads it saves.
public final class CallerCache: Sendable {
    struct Derived: Sendable {
        var exe: String?
        var exeDeleted: Bool
        var unit: String?
        var flatpakApp: String?
    }

    private struct Entry {
        let startTime: UInt64
        /// The pidfd's process id (pidfs) when the kernel has one.
        let processID: UInt64?
        let executable: FileID
        let derived: Derived
        let hasTerminal: Bool
    }

    /// What a lookup by process id returns: also the start time and terminal, which the caller then need not read.
    struct Known {
        let derived: Derived
        let startTime: UInt64
        let hasTerminal: Bool
    }

    let capacity: Int
    private let entries = Mutex<[Int32: Entry]>([:])
    /// How many lookups were answered (tests and diagnostics).
    let hits = Atomic<Int>(0)

    public init(capacity: Int = 256) { self.capacity = capacity }

    var count: Int { entries.withLock { $0.count } }

    func lookup(pid: Int32, startTime: UInt64, executable: FileID) -> Derived? {
        entries.withLock { entries in
            guard let entry = entries[pid], entry.startTime == startTime, entry.executable == executable else { return nil }
            hits.add(1, ordering: .relaxed)
            return entry.derived
        }
    }

    /// By the pidfd's process id: the same process for certain, without reading its start time.
    func lookup(pid: Int32, processID: UInt64, executable: FileID) -> Known? {
        entries.withLock { entries in
            guard let entry = entries[pid], entry.processID == processID, entry.executable == executable else { return nil }
            hits.add(1, ordering: .relaxed)
            return Known(derived: entry.derived, startTime: entry.startTime, hasTerminal: entry.hasTerminal)
        }
    }

    func store(pid: Int32, startTime: UInt64, processID: UInt64? = nil, executable: FileID, _ derived: Derived,
               hasTerminal: Bool = false) {
        entries.withLock { entries in
            if entries.count >= capacity, entries[pid] == nil { entries.removeAll(keepingCapacity: true) }
            entries[pid] = Entry(startTime: startTime, processID: processID, executable: executable, derived: derived,
                                 hasTerminal: hasTerminal)
        }
    }
}
