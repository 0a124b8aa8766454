/// Which local programs may get an account's tokens (`allowed_clients`, `confirm` in config.toml). Pure: the agent
/// asks ``decide(_:remembered:)`` with the caller's kernel-derived identity and any remembered consent decision.
public struct AccessPolicy: Sendable, Equatable {
    /// When a caller that no entry lists is asked about.
    public enum Confirm: String, Sendable, Equatable {
        /// Never: an unlisted caller is refused (or, with no list at all, served).
        case never
        /// The first request of a caller not listed waits for the user's Allow/Deny, which is remembered.
        case firstUse = "first-use"
    }

    /// nil: no `allowed_clients` key (any host process of the user; a sandboxed app or a forwarded host is asked). An empty list allows
    /// nobody without consent.
    public var allowedClients: [ClientRule]?
    public var confirm: Confirm
    /// `lock_with_session`: refused to every caller while the user's session is locked (AgentAccess's `SessionLock`).
    public var lockWithSession: Bool

    public init(allowedClients: [ClientRule]? = nil, confirm: Confirm = .never, lockWithSession: Bool = false) {
        self.allowedClients = allowedClients
        self.confirm = confirm
        self.lockWithSession = lockWithSession
    }

    /// No policy: any process of the user on the host is served; a sandboxed app is asked (``decide(_:remembered:)``).
    public static let open = AccessPolicy()

    public var isOpen: Bool { allowedClients == nil && confirm == .never }

    /// A request of `identity` may wait for the user's answer (`confirm = "first-use"`, or a sandboxed caller of an
    /// account without a policy): front ends cancel it when its client goes away, as they do a sign-in.
    public func mayAsk(_ identity: ClientIdentity) -> Bool {
        if case .granted = identity.kind { return false }
        return confirm == .firstUse || (isOpen && identity.isConfined)
    }

    /// Why a request was served or refused; the raw value goes to the audit record.
    public enum Reason: String, Sendable, Equatable, Codable {
        /// No policy on the account, and a caller outside any sandbox.
        case open
        /// An `allowed_clients` entry matches.
        case listed
        /// The user allowed this identity (now, or remembered from before).
        case approved
        /// An unlisted caller and no `confirm`.
        case notListed = "not_listed"
        /// The user denied this identity (now, or remembered from before).
        case deniedByUser = "denied_by_user"
        /// Nobody answered the consent question in time.
        case consentTimeout = "consent_timeout"
        /// The executable is unknown, deleted or replaced, or the caller runs in a pid namespace of its own or in a
        /// sandbox that names no app, so no path rule or decision can name it.
        case unidentified
        /// A forward of the agent's socket by an ssh client the agent made no session for (a bare `ssh -R`): the host
        /// is not known, so nothing names it (`authctl forward` makes one that does).
        case unknownForward = "unknown_forward"
        /// The process that opened the connection is gone: whoever holds the connection now is not who connected.
        case processExited = "process_exited"
        /// The request was written by another process than the one that opened the connection (a helper that kept
        /// the socket): whoever wrote it is not the identity the connection was judged by.
        case otherSender = "other_sender"
        /// The client already had as many consent questions open as one client may (AgentAccess's `AccessGate`).
        case tooManyQuestions = "too_many_questions"
        /// Its last question about the account was denied or not answered a short while ago: not asked again yet.
        case askedRecently = "asked_recently"
        /// A caller through a grant's socket, for an account the grant names (the grant is the user's consent).
        case granted
        /// A caller through a grant's socket, for an account the grant does not name.
        case notGranted = "not_granted"
        /// A grant's caller asked for a DPoP proof for a request its grant's `--dpop-url` rules do not allow, or for a
        /// token that is not DPoP-bound although the grant confines where its tokens may be used.
        case proofNotGranted = "proof_not_granted"
        /// A grant's caller asked for a scope or resource outside its grant's `--scope`/`--resource`, or the server
        /// gave a token wider than the grant (it ignored the narrower scope): not served.
        case scopeNotGranted = "scope_not_granted"
        /// The account (`lock_with_session`) or the grant (`--lock-with-session`) is not served while the user's
        /// session is locked, and it is.
        case sessionLocked = "session_locked"
        /// The grant the connection came through has ended (revoked, expired, or the process it was tied to exited).
        case grantEnded = "grant_ended"
        /// The request went away while it waited for a consent answer (its socket client hung up, its D-Bus caller
        /// left the bus, or the agent stopped): audited with the outcome `withdrawn`, nothing decided.
        case cancelled
    }

    /// What the agent does with a request.
    public enum Verdict: Sendable, Equatable {
        case grant(Reason)
        case deny(Reason)
        /// Ask the user (first use of an unlisted identity under `confirm = "first-use"`, or of a sandboxed app on an
        /// account without a policy).
        case ask
    }

    /// The decision for `identity`: listed callers are served; unlisted ones are asked about (first-use), served
    /// (no policy) or refused. `remembered` is the user's earlier decision for this (account, identity), if any.
    /// A sandboxed caller is never served by "no policy": it gets an account through a `flatpak:` entry or the
    /// user's consent, so an account without a policy asks about it. A caller that cannot be named (outside a Flatpak
    /// sandbox: an unknown, deleted or replaced executable, or a pid namespace of its own) is refused whenever a
    /// policy exists: it could be anything; in a sandbox that names no app it is refused
    /// even without a policy.
    /// A forwarded host is judged the same way as a sandboxed app (``ClientIdentity/isConfined``): an `ssh:` entry
    /// or consent; an unknown forward only by the explicit `ssh:unknown-host` entry.
    public func decide(_ identity: ClientIdentity, remembered: Bool?) -> Verdict {
        // A grant's caller is judged by its grant (``decide(_:account:)``), never by a policy.
        if case .granted = identity.kind { return .deny(.notGranted) }
        if isOpen, !identity.isConfined { return .grant(.open) }
        if let allowedClients, allowedClients.contains(where: { $0.matches(identity) }) { return .grant(.listed) }
        if identity.kind == .unknownForward { return .deny(.unknownForward) }
        guard identity.consentKey != nil else { return .deny(.unidentified) }
        guard mayAsk(identity) else { return .deny(.notListed) }
        switch remembered {
        case true?: return .grant(.approved)
        case false?: return .deny(.deniedByUser)
        case nil: return .ask
        }
    }

    /// The decision for a grant's caller on `account`: served for the grant's accounts, refused for any other,
    /// whatever the account's policy says (nobody is asked: the person made the grant). Nil for any other caller.
    public static func decide(_ identity: ClientIdentity, account: String) -> Verdict? {
        guard case .granted(let grant) = identity.kind else { return nil }
        return grant.accounts.contains(where: { ClientRule.sameBytes($0, account) }) ? .grant(.granted) : .deny(.notGranted)
    }

    /// How `authctl status` describes the policy, with a word on each entry that can never match.
    public var summary: String {
        let never = (allowedClients ?? []).compactMap(\.neverMatches)
        let lock = lockWithSession ? "; nobody while your session is locked" : ""
        return (never.isEmpty ? listSummary : listSummary + " (" + never.joined(separator: "; ") + ")") + lock
    }

    private var listSummary: String {
        switch (allowedClients, confirm) {
        case (nil, .never): return "any process of yours (no allowed_clients); sandboxed apps, containers and forwarded hosts are asked"
        case (nil, .firstUse): return "asks on first use by each program"
        case (let list?, .never): return list.isEmpty ? "nobody (allowed_clients is empty)" : "only \(list.map(\.description).joined(separator: ", "))"
        case (let list?, .firstUse):
            return list.isEmpty ? "asks on first use by each program" : "\(list.map(\.description).joined(separator: ", ")); asks others on first use"
        }
    }
}
