import AgentAccess
import AgentIPC
import AuthCore

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
        self.init(open: policy.isOpen, allowedClients: policy.allowedClients?.map(\.description),
                  confirm: policy.confirm.rawValue, summary: policy.summary)
    }
}
