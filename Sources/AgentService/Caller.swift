#if canImport(Glibc)
import Glibc
#endif
import AuthCore
import CAgentSocket
import Synchronization

/// Who asked: the peer's pid, uid and gid (`SO_PEERCRED` on the socket, the bus daemon's credentials on D-Bus),
/// which front end carried the request, and the identity derived from them by ``identify(peer:via:pidfd:)``
/// (executable, systemd unit, Flatpak app). Read by the agent once per connection, never taken from anything the
/// client sends.
public struct Caller: Sendable {
    public var pid: Int32 { didSet { audited = Caller.audit(pid, via, identity) } }
    public var uid: UInt32
    public var gid: UInt32
    public var via: String { didSet { audited = Caller.audit(pid, via, identity) } }
    /// The peer's executable (`/proc/PID/exe`) without a " (deleted)" suffix; nil when it cannot be read.
    public var exe: String?
    /// What the access policy judges: executable (and whether it was deleted or replaced), unit, Flatpak app.
    public var identity: ClientIdentity { didSet { audited = Caller.audit(pid, via, identity) } }
    /// ``wire``, made when the identity is set, for the audit records of this caller's requests.
    public private(set) var audited: AuditedCaller
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
        let identity = identity ?? ClientIdentity(exe: exe)
        self.identity = identity
        self.process = process
        self.hasTerminal = hasTerminal
        audited = Caller.audit(pid, via, identity)
    }

    private static func audit(_ pid: Int32, _ via: String, _ identity: ClientIdentity) -> AuditedCaller {
        AuditedCaller(Caller.wire(pid: pid, via: via, identity: identity))
    }

    /// True while the process that opened the connection (or sent the D-Bus call) still runs. A pid that was
    /// recycled by another process since then is not the same process: its start time differs. Without a pin
    /// (identity unavailable) false, so a policy fails closed.
    public var isStillConnectedProcess: Bool {
        process?.isAlive ?? false
    }

    /// The caller's identity from the kernel, computed once per connection. Synchronous and cheap (a few small
    /// `/proc` reads); runs on the connection's event loop, before its first request. `pidfd` is `SO_PEERPIDFD`'s
    /// descriptor when the kernel gives one (asked for only when needed): it proves that what was read under
    /// `/proc/PID` belonged to the process that connected, not to a later owner of its pid. The caller is then
    /// pinned by its start time.
    ///
    /// With a `cache`, a process that connected before (same pid and start time, so the same process) and still
    /// runs the same file (same device and inode behind `/proc/PID/exe`, so no `execve` of another binary since)
    /// reuses the executable path, unit and app read then; the start time, the terminal, whether the file at the path
    /// was replaced, and the pidfd are still read for every connection. A process that moved to another cgroup
    /// since its first connection keeps the unit it had then, for as long as it runs.
    ///
    /// `accepted` is the connection's place in the listening socket's queue (the socket's one accept loop numbers
    /// connections as it accepts them). With it, the cache also keeps the process's `/proc/PID` directory open
    /// (``CallerCache/pinned(pid:acceptedBefore:)``), and a later connection from the same pid is identified with a
    /// `statx` and a `readlinkat` under it and no pidfd; see ``identifyPinned``.
    ///
    /// `connection` is the socket's descriptor. Without a pidfd (kernels before 6.5, or `SO_PEERPIDFD` refused) the
    /// pid alone does not name the process that connected: it may have exited before it was read, and its pid be
    /// taken by another program, whose `/proc/PID` then reads consistently from start to end. So the connection is
    /// tied to the live process first: the process read must hold the connection's other end (a descriptor of the
    /// peer socket, by inode: ``tied(_:to:)``). A process that got the pid later holds it only if it was handed the
    /// socket (then whoever writes on it is checked per request, ``AcceptLoop``); one that cannot be tied is not
    /// identified, and so not served under a policy.
    public static func identify(peer: PeerCredentials, via: String, pidfd: @autoclosure () -> ProcessFD? = nil,
                                cache: CallerCache? = nil, accepted: UInt64? = nil, connection: Int32? = nil) -> Caller {
        let pid = peer.pid
        guard pid > 0 else { return Caller(pid: pid, uid: peer.uid, gid: peer.gid, via: via) }
        if let accepted, let cache, let pin = cache.pinned(pid: pid, acceptedBefore: accepted),
           let caller = identifyPinned(peer: peer, via: via, pin, cache: cache) {
            return caller
        }
        let pidfd = pidfd()
        let running = FileID(runningOf: pid)
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
                derived = .read(pid: pid)
            }
        }
        // Opened before the check below, so the check vouches for it too: it is this process's directory.
        let directory = accepted != nil && pidfd != nil && cache?.makeRoomForPin() == true ? ProcessDirectory.open(pid: pid) : nil
        let pin = started.map { ProcessPin(pid: pid, startTime: $0) }
        var caller = Caller(pid: pid, uid: peer.uid, gid: peer.gid, via: via, exe: derived.exe,
                            identity: derived.identity(running: running), process: pin, hasTerminal: terminal)
        // The process that connected died (its pid may be someone else's now) before or while we read: nothing
        // read can be trusted. The pidfd answers for the very process: still running means its pid was never
        // reused, so what was read under /proc/PID was its own. Without a pidfd, the start time read again answers
        // for whoever has the pid now.
        let stillTheSameProcess = switch pidfd?.isRunning {
        case true?: pin != nil
        case false?: false
        // Tied first, then the start time once more: the process read from start to end holds the connection.
        case nil: pin != nil && connection.map { Caller.tied(pid, to: $0) } ?? true && pin?.isAlive == true
        }
        if !stillTheSameProcess {
            caller.identity = ClientIdentity(exe: nil)
            caller.exe = nil
            // Not pinned either: the start time read may be a later owner's of the pid (process_exited).
            caller.process = nil
            caller.hasTerminal = false
        } else if let started, let running {
            // Also after a hit by start time when there is a process id now, so the next connection finds it by id,
            // and whenever the process can be pinned now.
            let pinned = directory.flatMap { directory in
                derived.exe.map { CallerCache.Pin(held: directory, accepted: accepted ?? 0, exe: $0,
                                                  exeDeletedAsRead: derived.exeDeleted, caller: caller,
                                                  executable: running) }
            }
            if !reused || (processID != nil && !reusedByID) || pinned != nil {
                cache?.store(pid: pid, startTime: started, processID: processID, executable: running, derived,
                             hasTerminal: terminal, pin: pinned)
            }
        }
        return caller
    }

    /// A connection from a pinned process (``CallerCache/pinned(pid:acceptedBefore:)``): the process whose
    /// `/proc/PID` directory the cache holds connected on an earlier connection, which the listening socket gave out before
    /// this one. Its queue is first in, first out, so that process already had this pid when this connection was
    /// made; if it still runs now, it had the pid throughout, and so it is the process that connected (the pid
    /// `SO_PEERCRED` reports is the connecting process's at `connect`).
    ///
    /// A `statx` (cached attributes) and a `readlinkat` of `exe` under the held directory prove that the process
    /// still runs the very file it ran when it was pinned (same device and inode: a name alone is not enough, since a
    /// process in a mount namespace of its own can mount another binary over its path and exec it under the same
    /// name), and that the kernel names it exactly as it did then. While that name is unchanged the path still leads
    /// to that file in the agent's namespace: renaming the file or a directory above it changes the name, and
    /// replacing or deleting it unlinks the file (" (deleted)"); only mounting over the path in the agent's own
    /// mount namespace would not, which takes privileges there. So the identity read when it was pinned holds, with
    /// its replaced-file verdict. Nil when the process has exited (then it is unpinned) or runs another file or one
    /// named otherwise now (another binary, a moved, replaced or deleted file): the full read decides then.
    static func identifyPinned(peer: PeerCredentials, via: String, _ pin: CallerCache.Pin,
                               cache: CallerCache) -> Caller? {
        // Both through the held directory, so both describe the pinned process (nothing can be looked up under it
        // once that process has exited, whoever has the pid now). Same name is not same file: in a mount namespace of
        // its own the process may have mounted another binary over its path and run that.
        let running = pin.held.executable
        switch pin.held.reads(pin.link) {
        case nil:
            cache.unpin(pid: peer.pid, pin.held)
            return nil
        case false?:
            return nil
        case true?:
            guard running == pin.executable else { return nil }
            cache.pinnedHits.add(1, ordering: .relaxed)
            // The caller as the full read made it when the process was pinned; the credentials are this
            // connection's own (the same unless the process changed its ids since).
            var caller = pin.caller
            (caller.uid, caller.gid) = (peer.uid, peer.gid)
            // Only if it differs: setting it makes the audited form again.
            if caller.via != via { caller.via = via }
            return caller
        }
    }

    /// Whether process `pid` holds the other end of the Unix socket `connection` (by the peer socket's inode). False
    /// when that cannot be read: untied is not served under a policy.
    static func tied(_ pid: Int32, to connection: Int32) -> Bool {
        var peer: UInt64 = 0
        return aa_socket_peer_inode(connection, &peer) == 0 && aa_process_holds_socket(pid, peer) == 1
    }

    /// The executable of process `pid`, as the kernel names it (a replaced or deleted binary ends in " (deleted)");
    /// nil when that name is not valid UTF-8.
    public static func executable(of pid: Int32) -> String? {
        guard pid > 0 else { return nil }
        var buffer = [CChar](repeating: 0, count: 4096)
        let count = readlink("/proc/\(pid)/exe", &buffer, buffer.count - 1)
        guard count > 0 else { return nil }
        // A path that is not UTF-8 is not decoded with replacement characters: two different paths would read
        // the same. No allowed_clients entry can name it (config.toml is UTF-8), so it is unknown.
        return String(validating: buffer[0..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// A small `/proc` file's text (at most `limit` bytes; a longer file is nil, not cut short), or nil.
    static func readText(_ path: String, limit: Int = 65536) -> String? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if n < 0 { return nil }
            if n == 0 { break }
            bytes.append(contentsOf: chunk[0..<n])
            if bytes.count > limit { return nil }
            // These files are generated whole on open (single_open): a short read is the end, no need to ask again.
            // Not so /proc/PID/mountinfo (a seq_file read a page at a time): it is read until the end.
            if n < chunk.count, !path.hasSuffix("/mountinfo") { break }
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}
