import AgentAccess
import AgentIPC
import AuthCore
import FoundationEssentials
import Logging

/// `authctl grant`: a door of its own for a workload the user trusts least (a container, an AI agent's sandbox),
/// serving the grant's accounts only (``Grants``).
extension AgentOperations {
    /// `grant`: makes a grant. Only a program of the desktop may; where an account has an access policy, only a
    /// person at a terminal (as for `approve`), since the grant serves whatever connects to its socket.
    /// Narrower tokens (`scopes`, `resource`) come from each account's refresh token where its server keeps a refresh
    /// token's scope (`scoped_tokens`), else from a sign-in of the grant's own, made here (the person consents in the
    /// browser, announced through `loginStarted` as `login` does): the grant is served once every such sign-in
    /// succeeded, and is revoked (its sign-ins with it) if one did not.
    public func makeGrant(_ request: WireRequest, caller: Caller,
                          loginStarted: @Sendable (WireEvent) async -> Void = { _ in }) async throws(WireError) -> GrantResult {
        guard let name = request.grant, !name.isEmpty else { throw WireError(.badRequest, "the 'grant' request needs a 'grant' name") }
        guard let accounts = request.accounts, !accounts.isEmpty else {
            throw WireError(.badRequest, "the 'grant' request needs 'accounts' (at least one)")
        }
        guard accounts.count <= 64 else { throw WireError(.badRequest, "a grant names at most 64 accounts") }
        let known = await broker.accountNames
        for account in accounts where !known.contains(account) {
            throw WireError(.unknownAccount, AuthError.unknownAccount(String(account.prefix(64))).message)
        }
        let guarded = accounts.filter { !access.policy(of: $0).isOpen }
        if !guarded.isEmpty, !(caller.hasTerminal && caller.isStillConnectedProcess) {
            throw WireError(.permissionDenied,
                "account \(guarded.map { "'\($0)'" }.joined(separator: ", ")) has an access policy: a grant of it is made only from a program run in a terminal (authctl), not from a background process")
        }
        let pid = try request.pid.map { pid throws(WireError) -> Int32 in
            guard let pid = Int32(exactly: pid), pid > 0 else { throw WireError(.badRequest, "'pid' must be a process id") }
            return pid
        }
        var unique: [String] = []
        for account in accounts where !unique.contains(account) { unique.append(account) }
        let proofURLs = request.dpopURLs ?? []
        if !proofURLs.isEmpty {
            // Confining proofs confines a token only when the token is useless without one.
            let status = await broker.status()
            for account in unique where status.accounts.first(where: { $0.name == account })?.dpop != "access_token" {
                throw WireError(.badRequest,
                    "account '\(account)' does not have DPoP-bound access tokens (as far as the agent knows: `authctl status` says so after a sign-in or a refresh), so --dpop-url would not confine where its tokens are used")
            }
        }
        let scopes = request.scopes.flatMap { $0.isEmpty ? nil : $0 }, resource = request.resource
        guard (scopes?.count ?? 0) <= 64 else { throw WireError(.badRequest, "a grant names at most 64 scopes") }
        var ownSignIns: [String] = []
        let maxTTL = request.maxTTL
        if scopes != nil || resource != nil || maxTTL != nil {
            // Never a wider token than granted: each account must hand out exactly these, by the rules a token
            // request with them meets (scopes it has, a resource that is a URI), from its refresh token or from a
            // sign-in of the grant's own. Otherwise the grant is not made.
            for account in unique {
                do throws(AuthError) {
                    if try await broker.narrowing(account: account, scopes: scopes, resource: resource,
                                                  ownTokens: maxTTL != nil) == .ownSignIn {
                        ownSignIns.append(account)
                    }
                    if maxTTL != nil { try await broker.requireRevocation(account: account) }
                } catch {
                    throw WireError(.badRequest, "grant '\(WireCaller.shown(name, limit: 64))' cannot serve account '\(account)' as asked: \(error.message)")
                }
            }
        }
        let method = try AgentOperations.loginMethod(request)
        let grant = try grants.create(name: name, accounts: unique, lifetime: request.lifetime, whilePID: pid,
                                      proofURLs: proofURLs, lockWithSession: request.lockWithSession ?? false,
                                      scopes: scopes, resource: resource, ownSignIns: ownSignIns, maxTTL: maxTTL)
        for signIn in AgentOperations.signIns(of: grant) {
            do throws(WireError) {
                try await translate { () async throws(AuthError) in
                    try await broker.addGrantSignIn(signIn)
                    let ticket = try await broker.beginLogin(account: signIn.name, method: method)
                    await loginStarted(AgentOperations.event(ticket))
                    _ = try await broker.awaitLogin(ticket)
                }
            } catch {
                grants.revoke(name, because: "its sign-in of \(signIn.account) did not complete")
                throw WireError(ErrorCode(rawValue: error.code) ?? .internalError,
                                "grant '\(name)' was not made: its own sign-in of '\(signIn.account)' did not complete: \(error.message)")
            }
        }
        return GrantResult(grant: AgentOperations.summary(grant))
    }

    /// `grant_revoke`: ends a grant now.
    public func revokeGrant(_ request: WireRequest) throws(WireError) -> GrantResult {
        guard let name = request.grant, !name.isEmpty else { throw WireError(.badRequest, "the 'grant_revoke' request needs a 'grant' name") }
        guard let grant = grants.revoke(name, because: "revoked") else {
            throw WireError(.badRequest, "no grant '\(WireCaller.shown(name, limit: 64))' exists; see `authctl grant --list`")
        }
        return GrantResult(grant: AgentOperations.summary(grant))
    }

    /// `token` with `grant` on the agent's own socket: a program of the desktop asks as grant `name` (`authctl token
    /// ACCOUNT --grant NAME`, a hook that serves a sandboxed tool) and is served as a caller of the grant's socket is:
    /// its accounts only, audited under its name. Asked here, not through the grant's socket: the workload may write
    /// the grant's directory (a writable mount), so what stands at that path is the workload's to choose. Only a
    /// program of the desktop may ask as a grant; a grant's caller, an app or a host never becomes another caller.
    public func asGrant(_ name: String, caller: Caller) throws(WireError) -> Caller {
        guard case .desktop = caller.identity.kind else {
            throw WireError(.permissionDenied, "only programs of the desktop may ask as a grant, not \(caller.described())")
        }
        guard Grants.isValidName(name) else {
            throw WireError(.badRequest, "'grant' is no grant name: \(Grants.nameRule)")
        }
        guard case .success(let granted) = grants.admit(caller, grant: name) else {
            throw WireError(.unknownGrant, "grant '\(name)' is not served: it was revoked or ended, or was never made")
        }
        return granted
    }

    /// The grants as `status` lists them; nil when there are none.
    func grantSummaries() -> [StatusResult.Grant]? {
        let list = grants.list()
        return list.isEmpty ? nil : list.map(AgentOperations.summary)
    }

    static func summary(_ grant: Grants.Grant) -> StatusResult.Grant {
        StatusResult.Grant(name: grant.name, accounts: grant.accounts, socket: grant.socketPath, created: grant.created,
                           expires: grant.expires, whilePID: grant.whilePID.map(Int.init), uses: grant.uses,
                           lastUse: grant.lastUse, dpopURLs: grant.proofURLs, lockWithSession: grant.lockWithSession,
                           scopes: grant.scopes, resource: grant.resource, ownSignIns: grant.ownSignIns,
                           maxTTL: grant.maxTTL)
    }

    /// For a grant's caller: the grant, which still lasts (its end may not have been acted on yet), else the refusal,
    /// audited. Any other caller passes: nil.
    func checkGrantLasts(_ caller: Caller, account: String, scopes: [String]?, resource: String?) throws(WireError) -> Grants.Grant? {
        guard case .granted(let grant) = caller.identity.kind else { return nil }
        guard let live = grants.live(grant.name) else {
            access.record(caller, account: account, granted: false, reason: .grantEnded, scopes: scopes, resource: resource)
            throw WireError(.permissionDenied, "grant '\(grant.name)' has ended; ask for a new one on the desktop (authctl grant)")
        }
        return live
    }

    /// A grant's sign-ins of its own (``GrantSignIn``): one per account it serves that way, with its scopes.
    static func signIns(of grant: Grants.Grant) -> [GrantSignIn] {
        (grant.ownSignIns ?? []).map {
            GrantSignIn(grant: grant.name, account: $0, scopes: grant.scopes, maxLifetime: grant.maxTTL.map { .seconds($0) })
        }
    }

    /// The broker's account a request for `account` is served from: through a `grant` (``checkGrantLasts``) that has
    /// a sign-in of its own for it, that sign-in (made known to the broker again after a restart; its token has the
    /// grant's scopes by itself), else `account`.
    func servedAccount(_ account: String, through grant: Grants.Grant?) async throws(WireError) -> (account: String, ownSignIn: Bool) {
        guard let grant, let signIn = AgentOperations.signIns(of: grant).first(where: { $0.account == account }) else {
            return (account, false)
        }
        try await translate { () async throws(AuthError) in try await broker.addGrantSignIn(signIn) }
        return (signIn.name, true)
    }

    /// For a grant's caller: the scopes and resource its request is served with (``ClientIdentity/Grant/served(scopes:resource:)``),
    /// or the audited refusal of a request outside the grant. Any other caller: as asked.
    func narrowed(_ caller: Caller, account: String, scopes: [String]?,
                  resource: String?) throws(WireError) -> (scopes: [String]?, resource: String?) {
        guard case .granted(let grant) = caller.identity.kind, grant.narrows else { return (scopes, resource) }
        guard let served = grant.served(scopes: scopes, resource: resource) else {
            access.record(caller, account: account, granted: false, reason: .scopeNotGranted, scopes: scopes, resource: resource)
            throw WireError(.accessDenied, "grant '\(grant.name)' serves \(AgentOperations.narrowing(grant)) only, not \(AgentOperations.asked(scopes, resource))")
        }
        return served
    }

    /// For a grant's caller whose grant narrows its scopes: the token the server gave stays within them (a server
    /// that ignores a narrower scope on refresh answers with all of the account's). Audited refusal otherwise.
    func checkWithinGrant(_ caller: Caller, account: String, given: [String]?, scopes: [String]?, resource: String?) throws(WireError) {
        guard case .granted(let grant) = caller.identity.kind, !grant.holds(given) else { return }
        access.record(caller, account: account, granted: false, reason: .scopeNotGranted, scopes: scopes, resource: resource)
        throw WireError(.accessDenied,
            "account '\(account)' got a token for \(given.map { "the scopes \($0.joined(separator: " "))" } ?? "scopes its server did not name") from its server, wider than grant '\(grant.name)' (\(AgentOperations.narrowing(grant))): not served; its server does not narrow tokens on refresh (set `scoped_tokens = false` for it; docs/PROVIDERS.md)")
    }

    static func narrowing(_ grant: ClientIdentity.Grant) -> String {
        [grant.scopes.map { "the scopes \($0.joined(separator: " "))" }, grant.resource.map { "the resource \($0)" }]
            .compactMap { $0 }.joined(separator: " for ")
    }

    static func asked(_ scopes: [String]?, _ resource: String?) -> String {
        let parts = [scopes.flatMap { $0.isEmpty ? nil : "the scopes \($0.map { WireCaller.shown($0, limit: 64) }.joined(separator: " "))" },
                     resource.map { "the resource \(WireCaller.shown($0, limit: 128))" }].compactMap { $0 }
        return parts.isEmpty ? "this request" : parts.joined(separator: " for ")
    }

    /// For a grant that confines its DPoP proofs (`--dpop-url`): a proof only for a request its rules allow, asked
    /// before the token is fetched, and the token only when it is DPoP-bound (checked once it is in hand). Audited
    /// refusals; any other caller passes.
    func checkProof(_ caller: Caller, account: String, proof: ProofTarget?, tokenType: String?) throws(WireError) {
        guard case .granted(let grant) = caller.identity.kind, !grant.proofURLs.isEmpty else { return }
        let rules = grant.proofURLs.compactMap { try? ProofRule($0) }
        if let proof, !ProofRule.allow(rules, method: proof.method, url: proof.url) {
            access.record(caller, account: account, granted: false, reason: .proofNotGranted,
                          proofFor: "\(proof.method) \(DPoPKey.target(proof.url))")
            throw WireError(.accessDenied,
                "grant '\(grant.name)' has DPoP proofs signed only for \(rules.map(\.description).joined(separator: "; ")), not for \(proof.method) \(DPoPKey.target(proof.url))")
        }
        if let tokenType, tokenType.lowercased() != "dpop" {
            access.record(caller, account: account, granted: false, reason: .proofNotGranted)
            throw WireError(.accessDenied,
                "account '\(account)' gave a token that is not DPoP-bound (\(tokenType)), which grant '\(grant.name)' cannot confine to its URLs: not served")
        }
    }

    /// `lock` / `unlock`: `authctl lock` for screen lockers that set no logind hint (swaylock). Any program of the
    /// desktop may say it (a locker runs without a terminal); logind's hint is not overridden.
    public func setLock(_ locked: Bool) -> LockResult {
        access.sessionLock.setManual(locked)
        logger.notice(locked ? "session locked (authctl lock)" : "session unlocked (authctl unlock)")
        return lockState()
    }

    func lockState() -> LockResult {
        let lock = access.sessionLock
        return LockResult(locked: lock.isLocked, lockedBy: lock.lockedBy, logind: lock.hint)
    }

    /// A request was served through a grant: counted for `status`.
    func countGrantUse(_ caller: Caller) {
        if case .granted(let grant) = caller.identity.kind { grants.used(grant.name) }
    }
}
