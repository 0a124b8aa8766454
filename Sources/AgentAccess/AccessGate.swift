import AgentIPC
import AuthCore
import FoundationEssentials
import Logging
import Synchronization

/// Somewhere to ask the user about a pending request (the desktop notification, `SignInNotifications`' sibling in
/// AgentDBus). `authctl approve`/`deny` work whether or not one is set.
public protocol ConsentPrompter: Sendable {
    /// Shows the question; the answer comes back through ``AccessGate/answer(_:allow:)``.
    func ask(_ request: PendingConsent)
    /// The request was answered or timed out: take the question away.
    func withdraw(_ id: Int)
}

/// The agent's door: judges each token request against the account's ``AccessPolicy`` with the caller's
/// kernel-derived identity, asks the user on first use, remembers the answers (``ConsentStore``) and writes the
/// ``AuditLog``. Its state is lock-protected and its verdicts synchronous; only a consent question waits.
public final class AccessGate: @unchecked Sendable {
    public let audit: AuditLog
    /// Replaced whole by a configuration reload (``replacePolicies(_:)``).
    let policies: Mutex<[String: AccessPolicy]>
    let consentTimeout: Duration
    let store: ConsentStore
    let logger: Logger
    /// Wall-clock Unix time, for records and decisions (a duration is never measured with it).
    let now: @Sendable () -> Int
    /// Waits for a consent question's time limit; production passes `ContinuousClock` sleeping.
    let sleep: @Sendable (Duration) async -> Void
    /// The monotonic clock of questions' deadlines and the cool-down after an unanswered one (``askAgainAfter``).
    let clock: @Sendable () -> ContinuousClock.Instant

    let lock = Mutex(())
    var decisions: [DecisionKey: ConsentStore.Decision] = [:]
    /// "Allow this run" answers, by (account, ``ClientIdentity/runKey``): in memory only, never saved.
    var runsAllowed: Set<DecisionKey> = []
    var pending: [Int: Pending] = [:]
    /// (account, client) whose last question was refused or timed out, and when it may be asked again.
    var quietUntil: [DecisionKey: ContinuousClock.Instant] = [:]
    var nextPendingID = 0
    var nextWaiterID = 0
    var prompter: (any ConsentPrompter)?
    /// Whether the user's session is locked (logind's hint, `authctl lock`), for what locks with it.
    public let sessionLock = SessionLock()

    /// Compared and hashed as bytes: a client is a path (or `flatpak:APP`), and canonically equivalent spellings
    /// that `String ==` calls equal are different files (``ClientRule/sameBytes(_:_:)``).
    struct DecisionKey: Hashable {
        var account: String
        var client: String

        static func == (a: DecisionKey, b: DecisionKey) -> Bool {
            ClientRule.sameBytes(a.account, b.account) && ClientRule.sameBytes(a.client, b.client)
        }

        func hash(into hasher: inout Hasher) {
            for byte in account.utf8 { hasher.combine(byte) }
            hasher.combine(0xFF as UInt8)  // not a UTF-8 byte: separates the two names
            for byte in client.utf8 { hasher.combine(byte) }
        }
    }

    struct Pending {
        var request: PendingConsent
        /// The asking caller's ``ClientIdentity/runKey``: what "allow this run" allows.
        var runKey: String?
        var requesterPID: Int32
        var deadline: ContinuousClock.Instant
        /// The requests that joined this question (``enqueue(_:account:client:)``) and have not gone away; the
        /// question is withdrawn when the last one does.
        var members = 1
        /// The requests waiting now, by waiter id (so a cancelled one can be taken out).
        var waiters: [Int: CheckedContinuation<ConsentAnswer, Never>] = [:]
        /// Ends the question at its time limit; cancelled when it is withdrawn.
        var timer: Task<Void, Never>?
    }

    public init(policies: [String: AccessPolicy] = [:], consentTimeout: Duration = .seconds(60),
                store: ConsentStore = ConsentStore(path: nil), auditCapacity: Int = 1000, logger: Logger,
                now: @escaping @Sendable () -> Int = { Int(Date().timeIntervalSince1970) },
                sleep: @escaping @Sendable (Duration) async -> Void = { try? await ContinuousClock().sleep(for: $0) },
                clock: @escaping @Sendable () -> ContinuousClock.Instant = { ContinuousClock.now }) {
        self.policies = Mutex(policies)
        self.consentTimeout = consentTimeout
        self.store = store
        self.logger = logger
        self.now = now
        self.sleep = sleep
        self.clock = clock
        self.audit = AuditLog(capacity: auditCapacity, logger: logger)
        do {
            for decision in try store.load() {
                decisions[DecisionKey(account: decision.account, client: decision.client)] = decision
            }
        } catch {
            logger.warning("cannot read the remembered consent decisions; asking again",
                           metadata: ["path": "\(store.path ?? "")", "error": "\(error)"])
        }
    }

    /// The policy of `account` (open for an account without one, and for unknown names: the broker refuses those).
    public func policy(of account: String) -> AccessPolicy { policies.withLock { $0[account] } ?? .open }

    /// Puts the policies of a reloaded configuration in force. Remembered decisions stay: they name an account and
    /// a client, and count only where the new policy still asks (`confirm = "first-use"`, or no policy for a
    /// sandboxed app).
    public func replacePolicies(_ policies: [String: AccessPolicy]) {
        self.policies.withLock { $0 = policies }
    }

    /// The verdict for `caller` on `account`, without asking anyone. Under a policy, a caller whose connecting
    /// process has exited (its pid may now be someone else's) is refused.
    public func verdict(_ caller: Caller, account: String) -> AccessPolicy.Verdict {
        judge(caller, account: account).verdict
    }

    /// The verdict, and the caller as it was judged: under a policy, the agent's authctl is seen through to the
    /// program behind it (``Caller/seenThroughRelay(in:)``), and the audit and the consent question name that program.
    /// An open account serves a host caller as it connected, with no walk and no check; a sandboxed one is judged
    /// in full, as under a policy (the policy asks about it or refuses it).
    func judge(_ caller: Caller, account: String) -> (caller: Caller, verdict: AccessPolicy.Verdict) {
        // Read once per request: the verdict and the session lock go by the same policy.
        let policy = policy(of: account)
        let (judged, verdict) = judgeUnlocked(caller, account: account, policy: policy)
        guard case .grant = verdict, locksWithSession(judged, policy: policy), sessionLock.isLocked else {
            return (judged, verdict)
        }
        return (judged, .deny(.sessionLocked))
    }

    /// Whether `caller`'s requests are refused while the session is locked: the account's `lock_with_session`
    /// (`policy`), or the grant the caller came through.
    func locksWithSession(_ caller: Caller, policy: AccessPolicy) -> Bool {
        if case .granted(let grant) = caller.identity.kind, grant.lockWithSession { return true }
        return policy.lockWithSession
    }

    /// The verdict under `policy` (the account's), without the session lock.
    func judgeUnlocked(_ caller: Caller, account: String, policy: AccessPolicy) -> (caller: Caller, verdict: AccessPolicy.Verdict) {
        if let granted = AccessPolicy.decide(caller.identity, account: account) { return (caller, granted) }
        if policy.isOpen, case .grant(.open) = policy.decide(caller.identity, remembered: nil) { return (caller, .grant(.open)) }
        let judged = caller.seenThroughRelay()
        // After the walk: this check vouches for what it read under /proc/PID of the caller. If it fails, the walk
        // may have read a later owner of the pid: the refusal names the caller as it connected.
        guard caller.isStillConnectedProcess else { return (caller, .deny(.processExited)) }
        let remembered = judged.identity.consentKey.flatMap { key in
            lock.withLock { _ in
                decisions[DecisionKey(account: account, client: key)]?.allowed
                    ?? judged.identity.runKey.flatMap { runsAllowed.contains(DecisionKey(account: account, client: $0)) ? true : nil }
            }
        }
        return (judged, policy.decide(judged.identity, remembered: remembered))
    }

    /// Decides a request, asking the user if the policy says so; throws `access_denied` (audited) when refused.
    /// Returns the reason of a grant and the caller as judged (for a relayed request, the program behind authctl),
    /// which the caller audits once the token is in hand.
    public func authorize(_ caller: Caller, account: String, scopes: [String]?, resource: String?,
                          announce: @Sendable (WireEvent) async -> Void) async throws(WireError)
        -> (reason: AccessPolicy.Reason, caller: Caller) {
        let (caller, verdict) = judge(caller, account: account)
        switch verdict {
        case .grant(let reason):
            return (reason, caller)
        case .deny(let reason):
            throw refuse(caller, account: account, reason: reason, scopes: scopes, resource: resource)
        case .ask:
            guard let key = caller.identity.consentKey else {
                throw refuse(caller, account: account, reason: .unidentified, scopes: scopes, resource: resource)
            }
            let id: Int
            let previousKey = previousHostKey(of: caller.identity, account: account)
            switch enqueue(caller, account: account, client: key, previousHostKey: previousKey) {
            case .success(let asked): id = asked
            case .failure(let held):
                record(caller, account: account, granted: false, reason: held.reason, scopes: scopes, resource: resource)
                throw held.error
            }
            await announce(WireEvent(type: WireEvent.consentRequired) {
                $0.timeoutSeconds = Int(consentTimeout.components.seconds); $0.request = id; $0.client = key
                $0.previousHostKey = previousKey
            })
            switch await wait(id, account: account, client: key, run: caller.identity.runKey) {
            case .allowed: return (.approved, caller)
            case .denied: throw refuse(caller, account: account, reason: .deniedByUser, scopes: scopes, resource: resource)
            case .timedOut: throw refuse(caller, account: account, reason: .consentTimeout, scopes: scopes, resource: resource)
            case .withdrawn:
                record(caller, account: account, outcome: AuditEntry.withdrawn, reason: .cancelled, scopes: scopes, resource: resource)
                throw WireError(.accessDenied, AccessGate.refusalMessage(caller, account: account, reason: .cancelled,
                                                                         timeout: consentTimeout))
            }
        }
    }

    /// Audits a refusal and returns the `access_denied` error naming the identity and how to allow it.
    func refuse(_ caller: Caller, account: String, reason: AccessPolicy.Reason, scopes: [String]?, resource: String?) -> WireError {
        record(caller, account: account, granted: false, reason: reason, scopes: scopes, resource: resource)
        return WireError(.accessDenied, AccessGate.refusalMessage(caller, account: account, reason: reason,
                                                                   timeout: consentTimeout, policy: policy(of: account)))
    }

    /// Appends an audit record for `caller`.
    public func record(_ caller: Caller, account: String, granted: Bool, reason: AccessPolicy.Reason,
                       scopes: [String]? = nil, resource: String? = nil, proofFor: String? = nil) {
        record(caller, account: account, outcome: granted ? AuditEntry.granted : AuditEntry.denied, reason: reason,
               scopes: scopes, resource: resource, proofFor: proofFor)
    }

    func record(_ caller: Caller, account: String, outcome: String, reason: AccessPolicy.Reason,
                scopes: [String]?, resource: String?, proofFor: String? = nil) {
        audit.append(time: now(), account: account, outcome: outcome, reason: reason.rawValue, scopes: scopes,
                     resource: resource, proofFor: proofFor, caller: caller.audited)
    }

    /// Why a caller was refused, and what the user can do about it. A confined caller is not told host pids. A
    /// forwarded host that an entry pins to another key is told its key changed, not to loosen the pin.
    static func refusalMessage(_ caller: Caller, account: String, reason: AccessPolicy.Reason, timeout: Duration,
                               policy: AccessPolicy = .open) -> String {
        let identity = caller.identity
        let who = caller.described(withPID: !identity.isConfined)
        let account = WireCaller.shown(account)
        switch reason {
        case .notListed:
            if case .forwarded(let host) = identity.kind,
               let pinned = policy.allowedClients?.lazy.compactMap({ $0.pinnedOtherKey(for: host) }).first {
                let name = WireCaller.shown(host.shownName)
                return "account '\(account)' does not serve \(who): the host key of \(name) changed: allowed_clients pins "
                    + "\(pinned), the host presented \(host.fingerprint). If you expected the change (the host was "
                    + "reinstalled or its key replaced; compare `ssh-keygen -lf` of its public key, on the host), re-pin it: "
                    + "replace the entry with \"ssh:\(name)@\(host.fingerprint)\" in [accounts.\(account)] of config.toml and "
                    + "run `authctl reload`. If not, someone else may answer as \(name): do not re-pin"
            }
            let unit = identity.kind == .desktop ? " (or a unit:NAME entry)" : ""
            let advice = identity.entry.map { "to allow it, add \"\(WireCaller.shown($0, limit: WireCaller.pathLimit))\"\(unit) to allowed_clients" }
                ?? "no allowed_clients entry can name it"
            return "account '\(account)' does not serve \(who): it is not in allowed_clients; \(advice) in [accounts.\(account)] of config.toml"
        case .deniedByUser:
            return "account '\(account)' does not serve \(who): you denied it; run `authctl forget --account \(account) --client \(WireCaller.shown(identity.consentKey ?? ""))` to be asked again"
        case .consentTimeout:
            return "account '\(account)' did not serve \(who): nobody allowed it within \(timeout.components.seconds) s; answer with `authctl approve ID` (see `authctl pending`) while it waits"
        case .unidentified:
            switch identity.kind {
            case .desktop where identity.relay != nil && identity.exe == nil:
                return "account '\(account)' does not serve \(who): the program that ran authctl cannot be identified (it runs as another user, changed while it was read, or is more than \(RelayChain.maxShells) shells away), so no allowed_clients entry or decision can name it; run authctl from the program itself, or list authctl's own path"
            case .desktop:
                return "account '\(account)' does not serve \(who): its executable is unknown, deleted or replaced since it started, so no allowed_clients entry or decision can name it; restart the program"
            case .hostContainer:
                return "account '\(account)' does not serve \(who): it runs in a root directory of its own, whose paths are its own, so no path entry or decision can name it; name it by a unit:NAME entry, or run it outside that root"
            case .container:
                return "account '\(account)' does not serve \(who): it runs in a pid namespace of its own (a container), where another process may write in its name, and no unit names it; run it outside, or give it a unit (a scope of its own)"
            case .unidentified(_, let claimed?):
                return "account '\(account)' does not serve \(who): the app it names (\(WireCaller.shown(claimed))) is not believed, so nothing can name it; run the app with `flatpak run`"
            default:
                return "account '\(account)' does not serve \(who): the agent cannot read who it is, so nothing can name it"
            }
        case .unknownForward:
            return "account '\(account)' does not serve \(who): a forward of the agent's socket made without `authctl forward` does not say which host it comes from; use `authctl forward HOST` instead of `ssh -R`, or allow any host explicitly with an \"ssh:unknown-host\" entry in allowed_clients"
        case .cancelled:
            return "account '\(account)' did not serve \(who): the request was withdrawn before anyone answered its consent question (its client went away)"
        case .notGranted:
            if case .granted(let grant) = identity.kind {
                return "grant '\(WireCaller.shown(grant.name))' does not include account '\(account)'; it serves \(grant.accounts.map { "'\(WireCaller.shown($0))'" }.joined(separator: ", ")) only"
            }
            return "account '\(account)' does not serve \(who): it is not granted"
        case .proofNotGranted:
            if case .granted(let grant) = identity.kind {
                return "grant '\(WireCaller.shown(grant.name))' has DPoP proofs signed only for \(grant.proofURLs.map { WireCaller.shown($0) }.joined(separator: "; "))"
            }
            return "account '\(account)' does not serve \(who): no such proof is granted"
        case .scopeNotGranted:
            if case .granted(let grant) = identity.kind {
                return "grant '\(WireCaller.shown(grant.name))' serves narrower tokens than were asked for or given"
            }
            return "account '\(account)' does not serve \(who): no such scope is granted"
        case .sessionLocked:
            let by = WireCaller.shown(caller.identity.grantName.map { "grant '\($0)'" } ?? "account '\(account)'")
            return "\(by) is not served while your session is locked (lock with session); it is served again once you unlock it"
        case .grantEnded:
            return "the grant this connection came through has ended; ask for a new one on the desktop (authctl grant)"
        case .processExited:
            return "account '\(account)' does not serve this connection: the process that opened it has exited, so whoever holds it now cannot be identified"
        case .otherSender:
            return "account '\(account)' does not serve this connection: another process wrote the request"
        case .tooManyQuestions:
            return "account '\(account)' did not ask about \(who): it has too many questions waiting for an answer"
        case .askedRecently:
            return "account '\(account)' does not serve \(who) now: its last question about this account was denied or not answered"
        case .open, .listed, .approved, .granted:
            return "account '\(account)' serves \(who)"
        }
    }
}

extension Caller {
    /// The identity as the wire carries it (audit records, pending requests).
    public var wire: WireCaller { audited.value }

    /// The caller in words (``WireCaller/described(withPID:)``), for messages and notifications.
    public func described(withPID: Bool = false) -> String { wire.described(withPID: withPID) }
}

/// A caller's ``WireCaller``, made once per ``Caller`` and shared by every audit record of its requests (a record
/// then holds one reference instead of copies of the strings).
public final class AuditedCaller: Sendable {
    public let value: WireCaller
    init(_ value: WireCaller) { self.value = value }
}
