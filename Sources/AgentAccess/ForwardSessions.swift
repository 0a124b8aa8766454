import AgentIPC
import AuthCore
import FoundationEssentials
import ProcessTree
import Synchronization

/// The `authctl forward` sessions: one per ssh session that forwards the agent to another host. Each has a socket of
/// its own in the agent's runtime directory, made for it and removed with it, that serves only the ssh process the
/// session was made for, and only once ssh said which host key it was shown; its callers are that host
/// (``ClientIdentity/Kind/forwarded(_:)``), never local programs.
///
/// A session lives as long as the `forward` request that opened it (authctl's connection: authctl waits for ssh) or
/// until `forward_stop`. Its steps, each checked against the kernel's process tree, not against anything sent:
/// 1. `forward`: a host program asks (``open(host:owner:)``); the agent binds the socket and answers with its path.
/// 2. `forward_ssh`: the same authctl names the ssh it started, which must be its child (``bindSSH(_:pid:by:)``).
/// 3. `forward_host_key`: ssh's `KnownHostsCommand` (authctl again) reports the key ssh was shown; it must be a child
///    of that ssh (``recordHostKey(_:fingerprint:by:)``).
public final class ForwardSessions: Sendable {
    /// One session, as `status` shows it.
    public struct Session: Sendable, Equatable {
        public let id: String
        /// The name ssh checks the host key under.
        public let host: String
        /// The name the person typed (a `Host` alias of their ssh configuration), when it is not ``host``.
        public let alias: String?
        public let socketPath: String
        public let opened: Date
        /// The authctl that opened it.
        let owner: ProcessPin
        /// The ssh it serves, once named.
        var ssh: ProcessPin?
        /// The host key ssh was shown, once it said so.
        public var fingerprint: String?
        /// ssh reported two different keys: nothing is served.
        var conflicting = false

        public var sshPID: Int32? { ssh?.pid }
        /// What people call the host: the name they typed, else ssh's.
        public var shownName: String { alias ?? host }
    }

    private struct Entry {
        var session: Session
        let stop: AsyncStream<Void>.Continuation
    }

    /// At most this many sessions at once (each holds a listening socket).
    public static let maxSessions = 64

    private let entries = Mutex<[String: Entry]>([:])
    private let listeners = Mutex<(any DoorListeners)?>(nil)

    public init() {}

    /// The socket front end that serves sessions' sockets (set when it starts listening).
    public func attach(_ listeners: any DoorListeners) {
        self.listeners.withLock { $0 = listeners }
    }

    /// Opens a session for `host` (as ssh checks its key), typed by the person as `alias`, asked by `owner`, a
    /// program of the user's on this host, with its socket in `directory`; `stopped` ends when the session is
    /// stopped (``stop(host:)``). The caller closes it when done.
    public func open(host: String, alias: String? = nil, owner: Caller, directory: String) throws(WireError)
        -> (session: Session, stopped: AsyncStream<Void>) {
        for name in [host, alias].compactMap({ $0 }) where !ClientRule.isHostName(name) {
            throw WireError(.badRequest, "'\(String(name.prefix(64)))' is not a host name as ssh names hosts")
        }
        let alias = alias.flatMap { ClientRule.sameBytes($0, host) ? nil : $0 }
        guard case .desktop = owner.identity.kind, let pin = owner.process else {
            throw WireError(.permissionDenied, "forwards are opened by programs on this computer only")
        }
        guard let listeners = listeners.withLock({ $0 }) else {
            throw WireError(.badRequest, "forwards are served over the agent's socket only")
        }
        let id = Randomness.token(bytes: 16)
        let path = "\(directory)/forward-\(id).sock"
        let (stopped, stop) = AsyncStream.makeStream(of: Void.self)
        let session = Session(id: id, host: host, alias: alias, socketPath: path, opened: Date(), owner: pin)
        let added = entries.withLock { entries -> Bool in
            guard entries.count < ForwardSessions.maxSessions else { return false }
            entries[id] = Entry(session: session, stop: stop)
            return true
        }
        guard added else {
            throw WireError(.agentBusy, "\(ForwardSessions.maxSessions) forwards are open; stop one first (authctl forward --stop HOST)")
        }
        do {
            try listeners.listen(path: path, door: .forward(id))
        } catch {
            entries.withLock { _ = $0.removeValue(forKey: id) }
            throw error
        }
        return (session, stopped)
    }

    /// Ends session `id`: its socket is closed and removed, and so is every connection made through it.
    public func close(_ id: String) {
        guard let entry = entries.withLock({ $0.removeValue(forKey: id) }) else { return }
        entry.stop.finish()
        listeners.withLock { $0 }?.close(door: .forward(id))
    }

    /// Ends every session for `host`, the name the person typed or the one ssh checks the key under (each one's
    /// `forward` request then returns); the sessions stopped.
    public func stop(host: String) -> [Session] {
        let stopped = entries.withLock { entries -> [Entry] in
            entries.values.filter { ClientRule.sameBytes($0.session.host, host) || ClientRule.sameBytes($0.session.alias, host) }
        }
        for entry in stopped { close(entry.session.id) }
        return stopped.map(\.session)
    }

    /// The open sessions, oldest first.
    public func list() -> [Session] {
        entries.withLock { $0.values.map(\.session) }.sorted { ($0.opened, $0.id) < ($1.opened, $1.id) }
    }

    /// `forward_ssh`: the ssh process `pid` serves session `id`. Only the authctl that opened it may say so, only
    /// once, and `pid` must be its child.
    public func bindSSH(_ id: String, pid: Int, by caller: Caller) throws(WireError) {
        guard let child = Int32(exactly: pid), child > 0,
              let stat = ProcStat.read(pid: child) else {
            throw WireError(.badRequest, "process \(pid) is not running")
        }
        try update(id) { session throws(WireError) in
            guard case .desktop = caller.identity.kind, caller.process == session.owner else {
                throw WireError(.permissionDenied, "only the authctl that opened this forward may name its ssh")
            }
            guard session.ssh == nil else { throw WireError(.badRequest, "this forward's ssh is named already") }
            guard stat.parent == caller.pid else {
                throw WireError(.permissionDenied, "process \(pid) was not started by the authctl that opened this forward")
            }
            session.ssh = ProcessPin(pid: child, startTime: stat.startTime)
        }
    }

    /// `forward_host_key`: ssh's `KnownHostsCommand` says which host key the server showed. The caller must be a
    /// child of the session's ssh. A second, different key makes the session serve nothing (ssh shows one key per
    /// connection; two mean the reports cannot be trusted).
    public func recordHostKey(_ id: String, fingerprint: String, by caller: Caller) throws(WireError) {
        guard ClientRule.isFingerprint(fingerprint) else {
            throw WireError(.badRequest, "'\(String(fingerprint.prefix(64)))' is not a SHA256 host key fingerprint")
        }
        let parent = ProcStat.read(pid: caller.pid)?.parent
        try update(id) { session throws(WireError) in
            guard case .desktop = caller.identity.kind, let ssh = session.ssh, parent == ssh.pid, ssh.isAlive,
                  caller.isStillConnectedProcess else {
                throw WireError(.permissionDenied, "only the ssh this forward serves may report its host key")
            }
            if let known = session.fingerprint, !ClientRule.sameBytes(known, fingerprint) { session.conflicting = true }
            session.fingerprint = session.fingerprint ?? fingerprint
        }
    }

    /// A connection to session `id`'s socket: served as that host when the session's ssh made it and ssh reported
    /// one host key; otherwise why not.
    public func admit(_ caller: Caller, session id: String) -> Result<Caller, WireError> {
        guard let session = entries.withLock({ $0[id]?.session }) else {
            return .failure(WireError(.permissionDenied, "this forward has ended"))
        }
        // Not the pids: the caller may be in a sandbox that should not learn host pids.
        guard let ssh = session.ssh, caller.process == ssh else {
            return .failure(WireError(.permissionDenied,
                "this socket serves the ssh session to \(session.shownName) only\(session.ssh == nil ? " (its ssh is not named yet)" : ""), not this caller"))
        }
        guard let fingerprint = session.fingerprint, !session.conflicting else {
            return .failure(WireError(.permissionDenied, session.conflicting
                ? "ssh reported two different host keys for \(session.shownName): this forward serves nothing"
                : "ssh has not reported the host key of \(session.shownName) (its KnownHostsCommand did not run)"))
        }
        var forwarded = caller
        forwarded.identity.kind = .forwarded(.init(name: session.host, alias: session.alias, fingerprint: fingerprint,
                                                   session: session.id))
        forwarded.via = "ssh:\(session.shownName)"
        return .success(forwarded)
    }

    private func update(_ id: String, _ body: (inout Session) throws(WireError) -> Void) throws(WireError) {
        try entries.withLock { entries throws(WireError) in
            guard var entry = entries[id] else { throw WireError(.badRequest, "no forward '\(String(id.prefix(64)))' is open") }
            try body(&entry.session)
            entries[id] = entry
        }
    }
}
