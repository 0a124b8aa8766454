import AgentIPC
import AuthCore
import FoundationEssentials
import Glibc
import Logging
import ProcessTree
import Synchronization

/// The grants the user made (`authctl grant`): each a socket of its own, in a directory of its own under the
/// agent's runtime directory, that a workload gets by having the directory mounted (a container's `-v`, bwrap's
/// `--bind`). A connection that arrives on a grant's socket is that grant, whatever process it is
/// (``ClientIdentity/Kind/granted(_:)``): it gets tokens (and DPoP proofs) of the grant's accounts and nothing else.
///
/// A grant ends when its time is up, when the process it was tied to exits, or when it is revoked: its socket is
/// closed and removed and every connection made through it closed at once. Until then it outlives the agent: the
/// grants are kept (names, accounts and limits; nothing secret) in the runtime directory, and an agent that starts
/// again binds each one's socket again at the same path, in the same directory, which a container mounted.
public final class Grants: Sendable {
    /// One grant, as `status` and `authctl grant --list` show it.
    public struct Grant: Sendable, Equatable, Codable {
        public let name: String
        public let accounts: [String]
        /// Unix times.
        public let created: Int
        public let expires: Int?
        /// The process it is tied to, pinned by its start time.
        public let whilePID: Int32?
        let whileStart: UInt64?
        public let socketPath: String
        /// Where its DPoP proofs may be used (``ProofRule``); nil: anywhere.
        public let proofURLs: [String]?
        /// Not served while the user's session is locked; nil: served.
        public let lockWithSession: Bool?
        /// The scopes its tokens are narrowed to (sorted), and the resource they are for; nil: the account's.
        public let scopes: [String]?
        public let resource: String?
        /// Its accounts served from a sign-in of its own (``GrantSignIn``), made with it and ended with it.
        public let ownSignIns: [String]?
        /// The longest a token handed through it stays valid, in seconds (its accounts are then its own sign-ins).
        public let maxTTL: Int?
        /// Requests served through it since the agent started, and when the last one was.
        public var uses: Int = 0
        public var lastUse: Int?

        enum CodingKeys: String, CodingKey {
            case name, accounts, created, expires, whilePID = "while_pid", whileStart = "while_start",
                 socketPath = "socket", proofURLs = "dpop_urls", lockWithSession = "lock_with_session",
                 scopes, resource, ownSignIns = "own_sign_ins", maxTTL = "max_ttl"
        }

        var pin: ProcessPin? {
            guard let whilePID, let whileStart else { return nil }
            return ProcessPin(pid: whilePID, startTime: whileStart)
        }

        /// The directory a workload mounts: the socket's.
        public var directory: String { String(socketPath.dropLast("/socket".count)) }
    }

    /// At most this many grants at once (each holds a listening socket).
    public static let maxGrants = 64
    /// A grant lasts at most this long (`--for`); without `--for` or `--while-pid` it lasts until revoked.
    public static let maxLifetime = 366 * 24 * 3600
    /// `--max-ttl` at the least: the agent hands out no token with less than 10 s left (``RefreshPolicy/minimumRemaining``),
    /// and one capped shorter would be refreshed more often than it is used.
    public static let minTokenLifetime = 15

    private struct Entry {
        var grant: Grant
        var timer: Task<Void, Never>?
    }

    private let entries = Mutex<[String: Entry]>([:])
    /// Told of every grant that ends, once (``whenEnded(_:)``).
    private let endHook = Mutex<(@Sendable (Grant) -> Void)?>(nil)
    private let listeners = Mutex<(any DoorListeners)?>(nil)
    /// `$XDG_RUNTIME_DIR/auth-agent/grants`; nil: no grants can be made (tests of other parts).
    let directory: String?
    let logger: Logger
    let now: @Sendable () -> Int

    public init(directory: String?, logger: Logger,
                now: @escaping @Sendable () -> Int = { Int(Date().timeIntervalSince1970) }) {
        self.directory = directory
        self.logger = logger
        self.now = now
    }

    /// Where the grants are kept between runs of the agent.
    var statePath: String? { directory.map { "\($0)/grants.json" } }

    /// The socket front end that serves grants' sockets. The grants of an earlier run that still last are served
    /// again from now on; the others are removed.
    public func attach(_ listeners: any DoorListeners) {
        self.listeners.withLock { $0 = listeners }
        restore()
    }

    public var isEmpty: Bool { entries.withLock { $0.isEmpty } }

    /// `hook` is told of each grant that ends, however it ends (revoked, its time, its process, or found ended when
    /// the agent starts again), after its socket is gone: what was made with the grant ends with it.
    public func whenEnded(_ hook: @escaping @Sendable (Grant) -> Void) {
        endHook.withLock { $0 = hook }
    }

    /// A grant name: letters, digits, `-`, `_` and `.`, at most 32, not starting with `-` or `.` (it names a directory).
    public static func isValidName(_ name: String) -> Bool { SocketPath.isGrantName(name) }

    /// What ``isValidName(_:)`` takes, in the words of the `bad_request` that refuses a name.
    public static let nameRule = "names use letters, digits, '-', '_' and '.' (at most 32, not starting with '-' or '.')"

    /// Makes grant `name` for `accounts`, lasting `lifetime` seconds and/or while process `whilePID` runs, and
    /// serves its socket. The caller (AgentOperations) has checked that the accounts exist and who asks.
    public func create(name: String, accounts: [String], lifetime: Int?, whilePID: Int32?,
                       proofURLs: [String] = [], lockWithSession: Bool = false, scopes: [String]? = nil,
                       resource: String? = nil, ownSignIns: [String] = [], maxTTL: Int? = nil) throws(WireError) -> Grant {
        guard Grants.isValidName(name) else {
            throw WireError(.badRequest, "'\(WireCaller.shown(name, limit: 64))' is no grant name: \(Grants.nameRule)")
        }
        guard !accounts.isEmpty else { throw WireError(.badRequest, "a grant needs at least one account") }
        guard proofURLs.count <= 32 else { throw WireError(.badRequest, "a grant takes at most 32 DPoP URL prefixes") }
        for rule in proofURLs {
            do { _ = try ProofRule(rule) } catch { throw WireError(.badRequest, error.message) }
        }
        if let maxTTL, !(Grants.minTokenLifetime...Grants.maxLifetime).contains(maxTTL) {
            throw WireError(.badRequest, "a grant's tokens may be capped at \(Grants.minTokenLifetime) seconds at the least")
        }
        if let lifetime, !(1...Grants.maxLifetime).contains(lifetime) {
            throw WireError(.badRequest, "a grant lasts between 1 second and \(Grants.maxLifetime / 86400) days")
        }
        var pin: ProcessPin?
        if let whilePID {
            guard whilePID > 0, let start = ProcStat.read(pid: whilePID)?.startTime else {
                throw WireError(.badRequest, "process \(whilePID) is not running")
            }
            pin = ProcessPin(pid: whilePID, startTime: start)
        }
        guard let directory, let listeners = listeners.withLock({ $0 }) else {
            throw WireError(.badRequest, "grants are served over the agent's socket only")
        }
        if mkdir(directory, 0o700) != 0 && errno != EEXIST {
            throw WireError(.internalError, "cannot make \(directory): \(String(cString: strerror(errno)))")
        }
        let created = now()
        let grant = Grant(name: name, accounts: accounts, created: created, expires: lifetime.map { created + $0 },
                          whilePID: pin?.pid, whileStart: pin?.startTime, socketPath: "\(directory)/\(name)/socket",
                          proofURLs: proofURLs.isEmpty ? nil : proofURLs, lockWithSession: lockWithSession ? true : nil,
                          scopes: scopes.map { Array(Set($0)).sorted() }, resource: resource,
                          ownSignIns: ownSignIns.isEmpty ? nil : ownSignIns, maxTTL: maxTTL)
        try entries.withLock { entries throws(WireError) in
            guard entries[name] == nil else {
                throw WireError(.badRequest, "grant '\(name)' exists; revoke it first (authctl grant --revoke \(name))")
            }
            guard entries.count < Grants.maxGrants else {
                throw WireError(.agentBusy, "\(Grants.maxGrants) grants exist; revoke one first (authctl grant --revoke NAME)")
            }
            entries[name] = Entry(grant: grant)
        }
        do {
            try serve(grant, listeners, fresh: true)
        } catch {
            entries.withLock { _ = $0.removeValue(forKey: name) }
            throw error
        }
        save()
        logger.notice("grant made", metadata: ["grant": "\(name)", "accounts": "\(accounts.joined(separator: ","))",
                                              "expires": "\(grant.expires.map(String.init) ?? "")", "while_pid": "\(whilePID.map(String.init) ?? "")"])
        return grant
    }

    /// Ends grant `name` now (`because` is for the log): its socket is closed and removed, and every connection made
    /// through it. Nil when there is no such grant.
    @discardableResult
    public func revoke(_ name: String, because: String) -> Grant? {
        guard let entry = entries.withLock({ $0.removeValue(forKey: name) }) else { return nil }
        entry.timer?.cancel()
        // The path goes first, so that nothing new connects; then the socket and its connections close.
        unlink(entry.grant.socketPath)
        listeners.withLock { $0 }?.close(door: .grant(name))
        retire(entry.grant)
        save()
        logger.notice("grant ended", metadata: ["grant": "\(name)", "because": "\(because)"])
        endHook.withLock { $0 }?(entry.grant)
        return entry.grant
    }

    /// The grants, oldest first.
    public func list() -> [Grant] {
        entries.withLock { $0.values.map(\.grant) }.sorted { ($0.created, $0.name) < ($1.created, $1.name) }
    }

    /// A connection to grant `name`'s socket: that grant, with what the agent saw of the process (its container and
    /// pid namespace, for the audit). Refused once the grant has ended.
    public func admit(_ caller: Caller, grant name: String) -> Result<Caller, WireError> {
        guard let grant = live(name) else { return .failure(WireError(.permissionDenied, "grant '\(name)' has ended")) }
        var granted = caller
        let container = caller.identity.unit.flatMap(Grants.container(unit:))
            ?? ProcFile.text("/proc/\(caller.pid)/cgroup").flatMap(Grants.container(cgroup:))
        granted.identity.kind = .granted(.init(name: grant.name, accounts: grant.accounts, container: container,
                                               pidNamespace: Grants.foreignPIDNamespace(of: caller.pid),
                                               proofURLs: grant.proofURLs ?? [],
                                               lockWithSession: grant.lockWithSession ?? false,
                                               scopes: grant.scopes, resource: grant.resource,
                                               ownSignIns: grant.ownSignIns ?? []))
        granted.via = "grant:\(name)"
        return .success(granted)
    }

    /// Grant `name` while it lasts (its end may not have been acted on yet: its timer and the exit watch run on
    /// other threads); nil once it has ended.
    public func live(_ name: String) -> Grant? {
        guard let grant = entries.withLock({ $0[name]?.grant }) else { return nil }
        if let expires = grant.expires, now() >= expires { return nil }
        if let pin = grant.pin, !pin.isAlive { return nil }
        return grant
    }

    /// A request was served through grant `name`.
    public func used(_ name: String) {
        let time = now()
        entries.withLock { entries in
            entries[name]?.grant.uses += 1
            entries[name]?.grant.lastUse = time
        }
    }

    /// `libpod-<id>.scope` (podman), `docker-<id>.scope`: the engine and the id's first 12 characters.
    static func container(unit: String) -> String? {
        for (prefix, engine) in [("libpod-", "podman"), ("docker-", "docker")]
        where unit.hasPrefix(prefix) && unit.hasSuffix(".scope") {
            let id = unit.dropFirst(prefix.count).dropLast(".scope".count)
            guard !id.isEmpty, id.allSatisfy(\.isHexDigit) else { return nil }
            return "\(engine) \(id.prefix(12))"
        }
        return nil
    }

    /// Podman's cgroupfs manager (where systemd does not run the machine, as in a container) puts a container in
    /// `/libpod_parent/libpod-<id>` on each hierarchy, a cgroup no unit names: the engine and the id's first 12
    /// characters from the first path with such a component. Nil for anything else (`/libpod_parent/conmon`).
    static func container(cgroup: String) -> String? {
        for line in cgroup.split(separator: "\n") {
            // hierarchy-ID:controllers:path
            let fields = line.split(separator: ":", maxSplits: 2, omittingEmptySubsequences: false)
            guard fields.count == 3 else { continue }
            for component in fields[2].split(separator: "/") where component.hasPrefix("libpod-") {
                let id = component.dropFirst("libpod-".count)
                if !id.isEmpty, id.allSatisfy(\.isHexDigit) { return "podman \(id.prefix(12))" }
            }
        }
        return nil
    }

    /// Process `pid`'s pid namespace (`pid:[4026532...]`) when it is not the agent's.
    static func foreignPIDNamespace(of pid: Int32) -> String? {
        guard let theirs = link("/proc/\(pid)/ns/pid"), let ours = link("/proc/self/ns/pid"), theirs != ours else { return nil }
        return theirs
    }

    private static func link(_ path: String) -> String? {
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 128) { buffer -> String? in
            let count = readlink(path, buffer.baseAddress!, buffer.count - 1)
            return count > 0 ? String(decoding: UnsafeBufferPointer(rebasing: buffer[0..<count]), as: UTF8.self) : nil
        }
    }

    // MARK: Serving and ending

    /// Binds the grant's socket and arms its ends. A new grant (`fresh`) gets a new directory: whatever an ended
    /// grant of the same name left at that path is moved aside first (``GrantDirectory``), so that a workload still
    /// holding the old one's mount cannot reach it. A grant served again after a restart keeps its directory (its
    /// workload's mount holds it), with a stale socket of the earlier run removed.
    private func serve(_ grant: Grant, _ listeners: any DoorListeners, fresh: Bool = false) throws(WireError) {
        let directory = grant.directory
        if fresh, case .kept(let why) = GrantDirectory.retire(directory) {
            throw WireError(.internalError, "cannot remove what an ended grant left at \(directory): \(why)")
        }
        if mkdir(directory, 0o700) != 0 && (fresh || errno != EEXIST) {
            throw WireError(.internalError, "cannot make \(directory): \(String(cString: strerror(errno)))")
        }
        var info = stat()
        guard lstat(directory, &info) == 0, info.st_mode & S_IFMT == S_IFDIR, info.st_uid == getuid() else {
            throw WireError(.internalError, "\(directory) is not a directory of this user's")
        }
        if lstat(grant.socketPath, &info) == 0, info.st_mode & S_IFMT == S_IFSOCK { unlink(grant.socketPath) }
        try listeners.listen(path: grant.socketPath, door: .grant(grant.name))
        let name = grant.name
        if let expires = grant.expires {
            let wait = max(0, expires - now())
            let timer = Task { [weak self] in
                do { try await Task.sleep(for: .seconds(wait)) } catch { return }
                self?.revoke(name, because: "its time is up")
            }
            entries.withLock { $0[name]?.timer = timer }
        }
        if let pin = grant.pin {
            listeners.watchExit(of: pin) { [weak self] in
                self?.revoke(name, because: "process \(pin.pid), which it was tied to, exited")
            }
        }
    }

    /// An ended grant's directory: removed, or moved aside and emptied when its workload left something in it.
    private func retire(_ grant: Grant) {
        switch GrantDirectory.retire(grant.directory) {
        case .removed: break
        case .movedAside:
            logger.notice("an ended grant's directory held files its workload left: moved aside and emptied", metadata: [
                "grant": "\(grant.name)"])
        case .kept(let why):
            logger.warning("cannot remove an ended grant's directory; a new grant of its name is refused until it is gone",
                           metadata: ["grant": "\(grant.name)", "path": "\(grant.directory)", "error": "\(why)"])
        }
    }

    /// Serves the grants of an earlier run that still last; removes the rest, and what earlier runs moved aside.
    private func restore() {
        if let directory { GrantDirectory.sweep(directory) }
        guard let statePath, let listeners = listeners.withLock({ $0 }),
              let data = FileManager.default.contents(atPath: statePath) else { return }
        guard let saved = try? JSONDecoder().decode([Grant].self, from: data) else {
            logger.warning("cannot read the grants of the last run; they are not served", metadata: ["path": "\(statePath)"])
            return
        }
        for grant in saved {
            let ended = grant.expires.map { now() >= $0 } ?? false || grant.pin.map { !$0.isAlive } ?? false
            if ended {
                unlink(grant.socketPath)
                retire(grant)
                endHook.withLock { $0 }?(grant)
                continue
            }
            entries.withLock { $0[grant.name] = Entry(grant: grant) }
            do {
                try serve(grant, listeners)
            } catch {
                entries.withLock { _ = $0.removeValue(forKey: grant.name) }
                logger.error("cannot serve a grant again", metadata: ["grant": "\(grant.name)", "error": "\(error.message)"])
            }
        }
        save()
        if !isEmpty { logger.notice("grants served again", metadata: ["grants": "\(list().map(\.name).joined(separator: ","))"]) }
    }

    /// Writes the grants to ``statePath`` (replacing the file whole), or removes it when there are none.
    private func save() {
        guard let statePath else { return }
        let grants = list()
        guard !grants.isEmpty else {
            unlink(statePath)
            return
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        guard let data = try? encoder.encode(grants) else { return }
        let temporary = statePath + ".new"
        let fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard fd >= 0 else {
            logger.error("cannot keep the grants for the next run", metadata: ["path": "\(statePath)", "error": "\(String(cString: strerror(errno)))"])
            return
        }
        let written = data.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        close(fd)
        if written != data.count || rename(temporary, statePath) != 0 {
            unlink(temporary)
            logger.error("cannot keep the grants for the next run", metadata: ["path": "\(statePath)"])
        }
    }
}
