import AgentAccess
import AgentIPC
import AuthCore
import Logging

/// The access-policy operations: the audit trail and answering consent questions.
extension AgentOperations {
    /// A `token` request of `caller` for `account` may wait for the user's consent answer: the front ends cancel it
    /// when its client goes away (socket closed, D-Bus caller gone), which withdraws the question.
    public func tokenMayWaitForPerson(account: String?, caller: Caller) -> Bool {
        account.map { access.policy(of: $0).mayAsk(caller.identity) } ?? false
    }

    /// `audit`: one page of the in-memory records, oldest first (``AuditLog/page(account:since:before:)``).
    public func audit(_ request: WireRequest) -> AuditResult {
        access.audit.page(account: request.account, since: request.since, before: request.before)
    }

    /// `pending`: the requests waiting for the user's answer.
    public func pending() -> PendingResult {
        PendingResult(requests: access.pendingRequests())
    }

    /// `approve` / `deny`: answers the pending request `request` names; remembered for its (account, client), or with
    /// `this_run` kept for this run only.
    public func answer(_ request: WireRequest, allow: Bool, caller: Caller) throws(WireError) -> ConsentResult {
        guard let pending = request.request else { throw WireError(.badRequest, "the request needs the pending request's id in 'request'") }
        return try access.answer(pending, allow: allow, thisRun: request.thisRun ?? false, approver: caller)
    }

    /// `forget`: drops remembered decisions, so those programs are asked again.
    public func forget(_ request: WireRequest, caller: Caller) throws(WireError) -> ForgetResult {
        let removed = try access.forget(account: request.account, client: request.client, by: caller)
        return ForgetResult(forgotten: removed.map { .init(account: $0.account, client: $0.client, allowed: $0.allowed) })
    }
}

extension AccountAccess {
    /// The status view of a policy.
    init(_ policy: AccessPolicy) {
        let never = (policy.allowedClients ?? []).compactMap(\.neverMatches)
        self.init(open: policy.isOpen, allowedClients: policy.allowedClients?.map(\.description),
                  confirm: policy.confirm.rawValue, summary: policy.summary, neverMatching: never.isEmpty ? nil : never)
    }
}

/// What a confined caller (a forwarded host, a sandboxed app) may ask at all, and how its identity is shown.
extension AgentOperations {
    /// What a confined caller (``ClientIdentity/isConfined``) may ask: tokens (with DPoP proofs) and the accounts it
    /// may use. Sign-ins, consent answers, configuration and forwards are for programs on this computer.
    static let confinedOperations: Set<AgentIPC.Operation> = [.ping, .token, .status, .accounts]

    /// The forward and grant operations: for programs of the desktop only (not a container that made its own root
    /// either).
    static let desktopOperations: Set<AgentIPC.Operation> = [.forward, .forwardSSH, .forwardHostKey, .forwardStop,
                                                             .grant, .grantRevoke, .lock, .unlock]

    /// Refuses what a confined caller may not ask, and forwards to anyone but a program of the desktop.
    func admitConfined(_ op: AgentIPC.Operation, caller: Caller) throws(WireError) {
        if caller.identity.isConfined, !AgentOperations.confinedOperations.contains(op) {
            throw WireError(.permissionDenied,
                "\(caller.described()) may only get tokens of the accounts it was given: '\(op.rawValue)' is for programs on the computer where the agent runs")
        }
        if AgentOperations.desktopOperations.contains(op), caller.identity.kind != .desktop {
            let what = switch op {
            case .grant, .grantRevoke: "grants are made and revoked"
            case .lock, .unlock: "the session lock is set"
            default: "forwards are opened and managed"
            }
            throw WireError(.permissionDenied, "\(what) by programs of the desktop only, not by \(caller.described())")
        }
    }

    /// A forwarded caller with the program its host says asks (`program`, not verified: shown as said by the host,
    /// never judged); any other caller unchanged.
    public static func withSaidProgram(_ program: String?, _ caller: Caller) -> Caller {
        guard let program, !program.isEmpty, case .forwarded(var host) = caller.identity.kind else { return caller }
        var said = caller
        // Kept as said (the describer shows it escaped); bounded here, as anything a caller sends.
        host.program = String(String.UnicodeScalarView(program.unicodeScalars.prefix(256)))
        said.identity.kind = .forwarded(host)
        return said
    }

    /// Whether `caller` may learn of `account` (see it listed, its status, its D-Bus signals): a program of the desktop
    /// always; a confined caller only when the account serves it now without asking. An app learns nothing of the
    /// accounts it was not given.
    public func mayLearnOf(_ account: String, caller: Caller) -> Bool {
        !caller.identity.isConfined || serves(caller, account: account)
    }

    /// Whether `caller` may use `account` now without anyone being asked: what a confined caller is shown.
    func serves(_ caller: Caller, account: String) -> Bool {
        if case .grant = access.verdict(caller, account: account) { return true }
        return false
    }

    /// Runs `body` for `caller`; a sign-in it needs, for a confined caller, is refused with where to sign in: never
    /// on the other host or in the sandbox, only on the desktop, by its user.
    func signInElsewhere<T>(_ account: String, for caller: Caller,
                            _ body: () async throws(WireError) -> T) async throws(WireError) -> T {
        do {
            return try await body()
        } catch where error.code == ErrorCode.loginRequired.rawValue && caller.identity.isConfined {
            logger.notice("a sign-in is needed for a confined caller", metadata: [
                "account": "\(account)", "via": "\(caller.via)"])
            broker.announceSignInWanted(account, by: caller.described(),
                                        caller: caller.identity.consentKey ?? "\(caller.wire.kind) \(caller.via)")
            // A grant's caller may be a container or a hook on the desktop itself: "not here" would be wrong there.
            let message = if let grant = caller.identity.grantName, GrantSignIn.isGrantSignIn(account) {
                "grant '\(grant)''s own sign-in has ended, and a grant never starts one: on the computer where the agent runs, revoke the grant and make it again (authctl grant)"
            } else if caller.identity.grantName == nil {
                "account '\(account)' needs a sign-in, which happens on the computer where the agent runs, not here: run `authctl login \(account)` there"
            } else {
                "account '\(account)' needs a sign-in, which a grant never starts: run `authctl login \(account)` on the computer where the agent runs"
            }
            throw WireError(.loginRequired, message, retryAfter: error.retryAfter)
        }
    }
}
