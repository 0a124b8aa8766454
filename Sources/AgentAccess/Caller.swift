import Glibc
import AgentIPC
import AuthCore
import CAgentSocket
import CProcFS
import ProcessTree

/// Who asked: the peer's pid, uid and gid (`SO_PEERCRED` on the socket, the bus daemon's credentials on D-Bus),
/// which front end carried the request, and the identity derived from them by ``identify(peer:via:pidfd:connection:)``
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
        AuditedCaller(WireCaller(pid: pid, via: via, identity: identity))
    }

    /// True while the process that opened the connection (or sent the D-Bus call) still runs. A pid that was
    /// recycled by another process since then is not the same process: its start time differs. Without a pin
    /// (identity unavailable) false, so a policy fails closed.
    public var isStillConnectedProcess: Bool {
        process?.isAlive ?? false
    }

    /// The caller's identity from the kernel, read in full for every connection and every D-Bus call: one route, no
    /// cache. Synchronous and cheap (a few small `/proc` reads); runs on the front end's own thread (the accept loop,
    /// the bus loop) before the request is served. The start time is read first, then the executable, unit and app
    /// and whether the file at the path was replaced, then a check that the process that connected ran throughout;
    /// the start time then pins it (``process``) for the check each request under a policy makes.
    ///
    /// `pidfd` is `SO_PEERPIDFD`'s descriptor where the kernel gives one: still running at the end means its pid was
    /// never reused, so what was read under `/proc/PID` was its own. Without one (kernels before 6.5, or
    /// `SO_PEERPIDFD` refused) the pid alone does not name the process that connected: it may have exited before it
    /// was read, and its pid be taken by another program, whose `/proc/PID` then reads consistently from start to
    /// end. So the connection (the socket's descriptor, `connection`) is tied to the live process: the process read
    /// must hold its other end (a descriptor of the peer socket, by inode: ``tied(_:to:)``), and then its start time
    /// is read again. A process that got the pid later holds it only if it was handed the socket (then whoever writes
    /// on it is checked per request, ``AcceptLoop``); one that cannot be tied is not identified, and so not served
    /// under a policy. A D-Bus call has neither: the start time read again answers for whoever has the pid now.
    public static func identify(peer: PeerCredentials, via: String, pidfd: ProcessFD? = nil,
                                connection: Int32? = nil) -> Caller {
        let pid = peer.pid
        // No pid: the process is outside the agent's pid namespace (an agent started in one of its own, a caller in
        // a sibling container) or the bus did not say. Not a program of the desktop: confined, named by nothing.
        guard pid > 0 else {
            return Caller(pid: pid, uid: peer.uid, gid: peer.gid, via: via, exe: nil,
                          identity: ClientIdentity(.unidentified(why: "the kernel does not name the process that connected (another pid namespace)"), exe: nil))
        }
        let stat = ProcStat.read(pid: pid)
        let pin = stat.map { ProcessPin(pid: pid, startTime: $0.startTime) }
        let terminal = (stat?.controllingTerminal ?? 0) != 0
        let facts = ProcessFacts.read(pid: pid)
        var caller = Caller(pid: pid, uid: peer.uid, gid: peer.gid, via: via, exe: facts.exe,
                            identity: facts.identity(running: FileID(runningOf: pid)), process: pin,
                            hasTerminal: terminal)
        // The process that connected died (its pid may be someone else's now) before or while we read: nothing
        // read can be trusted.
        let stillTheSameProcess = switch pidfd?.isRunning {
        case true?: pin != nil
        case false?: false
        // Tied first, then the start time once more: the process read from start to end holds the connection.
        case nil: pin != nil && connection.map { Caller.tied(pid, to: $0) } ?? true && pin?.isAlive == true
        }
        // An ssh client connecting to the agent does it for another host (`ssh -R` or `-L` of the agent's socket):
        // a forward, never a local program. `authctl forward`'s own sessions name the host (ForwardSessions.admit).
        if case .desktop = facts.kind, let exe = facts.exe, exe.split(separator: "/").last == "ssh" {
            caller.identity.kind = .unknownForward
            caller.via = "ssh:\(ClientRule.unknownHost)"
        }
        if !stillTheSameProcess {
            caller.identity = ClientIdentity(.unidentified(why: "the process that connected exited while it was read"), exe: nil)
            caller.exe = nil
            // Not pinned either: the start time read may be a later owner's of the pid (process_exited).
            caller.process = nil
            caller.hasTerminal = false
        }
        return caller
    }

    /// Whether process `pid` holds the other end of the Unix socket `connection` (by the peer socket's inode). False
    /// when that cannot be read: untied is not served under a policy.
    static func tied(_ pid: Int32, to connection: Int32) -> Bool {
        var peer: UInt64 = 0
        return aa_socket_peer_inode(connection, &peer) == 0 && aa_process_holds_socket(pid, peer) == 1
    }
}
