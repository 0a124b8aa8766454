#if canImport(Glibc)
import Glibc
#endif
import AuthCore

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
    /// `/proc` reads); runs on the connection's task, before its first request. `pidfd` is `SO_PEERPIDFD`'s
    /// descriptor when the kernel gave one: it proves that what was read under `/proc/PID` belonged to the process
    /// that connected, not to a later owner of its pid. The caller is then pinned by its start time.
    public static func identify(peer: PeerCredentials, via: String, pidfd: ProcessFD? = nil) -> Caller {
        let pid = peer.pid
        guard pid > 0 else { return Caller(pid: pid, uid: peer.uid, gid: peer.gid, via: via) }
        // The start time is read first and checked last: everything read in between belongs to that process.
        let stat = readText("/proc/\(pid)/stat")
        let started = stat.flatMap(ProcFS.startTime(stat:))
        let link = Caller.executable(of: pid).map(ProcFS.executable(link:))
        var deleted = link?.deleted ?? false
        if let link, !deleted, replaced(pid: pid, path: link.path) { deleted = true }
        let unit = readText("/proc/\(pid)/cgroup").flatMap(ProcFS.unit(cgroup:))
        let app = readText("/proc/\(pid)/root/.flatpak-info").flatMap(ProcFS.flatpakApp(info:))
            ?? unit.flatMap(ProcFS.flatpakApp(unit:))
        let pin = started.map { ProcessPin(pid: pid, startTime: $0) }
        var caller = Caller(pid: pid, uid: peer.uid, gid: peer.gid, via: via, exe: link?.path,
                            identity: ClientIdentity(exe: link?.path, exeDeleted: deleted, unit: unit, flatpakApp: app),
                            process: pin,
                            hasTerminal: (stat.flatMap(ProcFS.controllingTerminal(stat:)) ?? 0) != 0)
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

    /// The file now at `path` is not the one the process runs (replaced by a rename, e.g. an upgrade or an
    /// attacker's copy): the path no longer names the running code.
    static func replaced(pid: Int32, path: String) -> Bool {
        var running = stat()
        var named = stat()
        guard stat("/proc/\(pid)/exe", &running) == 0 else { return false }
        guard stat(path, &named) == 0 else { return true }
        return running.st_dev != named.st_dev || running.st_ino != named.st_ino
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
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}
