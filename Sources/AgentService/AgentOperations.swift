import AgentAccess
import AgentConfig
import AgentIPC
import AuthCore
import FoundationEssentials
import Logging

/// The agent's operations as typed calls onto ``TokenBroker``, shared by every front end (the socket's
/// ``RequestDispatcher`` and the D-Bus object), so there is one implementation of each: argument checks, the
/// interactive-token dance, the mapping of domain results onto the versioned result types and of ``AuthError``
/// onto the stable ``ErrorCode``s, and the request log. Front ends only decode their own framing and encode
/// these results.
public struct AgentOperations: Sendable {
    /// Reached only through these operations: front ends never call the broker themselves.
    let broker: TokenBroker
    public let info: AgentInfo
    /// Who may get which account's tokens (allow-lists, first-use consent) and the audit trail.
    public let access: AccessGate
    /// Whether the configuration file is in force or broken, and how to read it again (`reload`).
    public let configuration: ConfigurationGate
    /// The `authctl forward` sessions open now.
    public let forwards: ForwardSessions
    /// The grants (`authctl grant`), each a socket of its own in `grants/` beside the agent's socket.
    public let grants: Grants
    /// How often confined callers may force a refresh (``token(account:_:caller:loginStarted:)``).
    let forcedRefreshes: TokenEndpointLimit
    /// Confined callers' tokens of scope or resource sets not cached yet: four per account a minute, all together.
    let newTokenSets: TokenEndpointLimit
    let logger: Logger

    public init(broker: TokenBroker, info: AgentInfo, access: AccessGate? = nil,
                configuration: ConfigurationGate? = nil, logger: Logger) {
        self.broker = broker
        self.info = info
        self.access = access ?? AccessGate(logger: logger)
        self.configuration = configuration ?? ConfigurationGate(source: nil)
        self.forwards = ForwardSessions()
        let directory = info.socketPath[..<(info.socketPath.lastIndex(of: "/") ?? info.socketPath.startIndex)]
        self.grants = Grants(directory: directory.isEmpty ? nil : "\(directory)/grants", logger: logger)
        // A grant's sign-ins of its own end with it: revoked at the server, deleted from the keyring.
        grants.whenEnded { [broker] grant in
            let signIns = AgentOperations.signIns(of: grant)
            guard !signIns.isEmpty else { return }
            Task { for signIn in signIns { await broker.endGrantSignIn(signIn) } }
        }
        self.forcedRefreshes = TokenEndpointLimit(time: broker.clock)
        self.newTokenSets = TokenEndpointLimit(perInterval: 4, time: broker.clock)
        self.logger = logger
    }

    /// Runs one operation with the request log around it: a debug line per request and an info line per failure,
    /// with the operation, account, peer and error code as metadata (never request data). The metadata is built
    /// only when a line is logged.
    public func perform<T>(_ op: AgentIPC.Operation, account: String?, caller: Caller,
                           _ body: () async throws(WireError) -> T) async throws(WireError) -> T {
        logRequest(op, account: account, caller: caller)
        do {
            // While the configuration file is broken every request but `reload` is answered with its problem.
            try admitConfined(op, caller: caller)
            if op != .reload { try await configuration.admit() }
            return try await body()
        } catch {
            if logger.logLevel <= .info {
                var meta = AgentOperations.requestMetadata(op, account: account, caller: caller)
                meta["error_code"] = "\(error.code)"
                logger.info("request failed", metadata: meta)
            }
            throw error
        }
    }

    /// The request log's debug line.
    func logRequest(_ op: AgentIPC.Operation, account: String?, caller: Caller) {
        guard logger.logLevel <= .debug else { return }
        logger.debug("request", metadata: AgentOperations.requestMetadata(op, account: account, caller: caller))
    }

    /// A request written by another process (`sender`) than the one that connected (`caller`), as the socket front
    /// end saw it: nothing it asks is served. Logged, audited for the account its line names (the audit's one writer,
    /// as for every grant and refusal), and answered with the returned `permission_denied`.
    public func refuseOtherSender(_ request: WireRequest?, caller: Caller, sender: Int32) -> WireError {
        var metadata = AgentOperations.requestMetadata(.token, account: request?.account, caller: caller)
        metadata["operation"] = request.map { "\($0.op)" }
        metadata["sender_pid"] = "\(sender)"
        logger.warning("refused a request written by another process than the one that connected", metadata: metadata)
        if let account = request?.account {
            access.record(caller, account: account, granted: false, reason: .otherSender, scopes: request?.scopes,
                          resource: request?.resource)
        }
        // A confined caller is not told host pids; the journal line above has them.
        let pids = caller.identity.isConfined ? "" : " (opened by pid \(caller.pid), written by pid \(sender))"
        return WireError(.permissionDenied,
            "another process wrote to this connection than the one that opened it\(pids): requests are taken only from the process that connected")
    }

    static func requestMetadata(_ op: AgentIPC.Operation, account: String?, caller: Caller) -> Logger.Metadata {
        var meta: Logger.Metadata = ["operation": "\(op.rawValue)", "peer_pid": "\(caller.pid)", "peer_uid": "\(caller.uid)"]
        if caller.via != "socket" { meta["via"] = "\(caller.via)" }
        // What a caller chose (an account name, a path in its own root) is shown as everywhere else: controls and
        // bidi marks replaced, bounded (SECURITY.md): a log line is never the caller's to write.
        if let exe = caller.exe { meta["peer_exe"] = "\(WireCaller.shown(exe, limit: WireCaller.pathLimit))" }
        if let account { meta["account"] = "\(WireCaller.shown(account))" }
        return meta
    }

    public func ping() -> PingResult { PingResult(agentVersion: info.version) }

    /// The broker's events, for front ends that push them (D-Bus signals, notifications).
    public func events() -> AsyncStream<BrokerEvent> { broker.events() }

    /// Re-reads the configuration file and puts it in force; an invalid file is refused with `config_error`.
    /// `trigger` names what asked when it was not a request (SIGHUP), for the log line.
    public func reload(trigger: String? = nil) async throws(WireError) -> ReloadResult {
        let result = try await configuration.reload()
        logger.notice("configuration reloaded\(trigger.map { " (\($0))" } ?? "")", metadata: [
            "path": "\(result.path)", "accounts": "\(result.accounts.count)", "added": "\(result.added.joined(separator: ","))",
            "removed": "\(result.removed.joined(separator: ","))", "changed": "\(result.changed.joined(separator: ","))",
            "needs_restart": "\(result.needsRestart.joined(separator: ","))"])
        return result
    }

    /// A confined caller (a forwarded host, a sandboxed app) is shown only the accounts it may use.
    public func accounts(caller: Caller) async -> AccountsResult {
        let status = await broker.status()
        return AccountsResult(accounts: status.accounts.filter { !GrantSignIn.isGrantSignIn($0.name) && mayLearnOf($0.name, caller: caller) }.map {
            AccountSummary(name: $0.name, issuer: $0.issuer, clientID: $0.clientID,
                           redirectURI: $0.registeredRedirectURI, scopes: $0.scopes,
                           gitHosts: $0.gitHosts.isEmpty ? nil : $0.gitHosts)
        })
    }

    /// An access token valid for the request's `min_valid` seconds, for `caller` if the account's access policy serves
    /// it (asking the user first if it says so; the grant or refusal is audited). With `interactive`, a missing
    /// sign-in is started (or joined) and announced through `loginStarted` before the wait. `dpop_method` and
    /// `dpop_url`: the request a program wants a DPoP proof for; a DPoP-bound token then comes with its proof.
    /// `account` is the request's, as the front end requires it: a name the configuration's grammar refuses is
    /// `bad_request`, one no account has is `unknown_account`, both before anyone judges or asks about the caller
    /// (a question about an account that does not exist would only let a caller raise questions at will). A confined
    /// caller's `force_refresh` is honoured once per account per ``TokenEndpointLimit/interval`` (for all of them
    /// together); beyond that it gets the cached token.
    public func token(account: String, _ request: WireRequest, caller: Caller,
                      loginStarted: @Sendable (WireEvent) async -> Void = { _ in }) async throws(WireError) -> TokenResult {
        guard AccountConfig.isValidName(account) else {
            throw WireError(.badRequest, "'account' is no account name: names use letters, digits, '-', '_' and '.' (at most 64, not starting with '-' or '.')")
        }
        guard await broker.accountNames.contains(account) else {
            throw WireError(.unknownAccount, AuthError.unknownAccount(account).message)
        }
        let method = try AgentOperations.loginMethod(request), dpop = try AgentOperations.proofTarget(request)
        let minValid = request.minValid ?? 0
        let asked = (scopes: request.scopes, resource: request.resource)
        guard WireProtocol.minValidRange.contains(minValid) else {
            throw WireError(.badRequest, "min_valid must be between 0 and \(WireProtocol.minValidRange.upperBound) seconds")
        }
        guard (asked.scopes?.count ?? 0) <= 64 else { throw WireError(.badRequest, "at most 64 scopes may be asked for") }
        var proof: ProofTarget?
        if let dpop {
            do { proof = try ProofTarget(method: dpop.method, url: dpop.url, nonce: dpop.nonce) } catch {
                throw WireError(AgentOperations.wireCode(error.code), error.message)
            }
        }
        let (reason, judged) = try await access.authorize(caller, account: account, scopes: asked.scopes, resource: asked.resource,
                                                announce: loginStarted)
        let grantInForce = try checkGrantLasts(judged, account: account, scopes: asked.scopes, resource: asked.resource)
        // A grant's caller: within its grant's scopes and resource, never wider; from its own sign-in where it has one.
        let (scopes, resource) = try narrowed(judged, account: account, scopes: asked.scopes, resource: asked.resource)
        let served = try await servedAccount(account, through: grantInForce)
        try checkProof(judged, account: account, proof: proof, tokenType: nil)
        // A confined caller never starts a sign-in: it happens on the desktop, by its user (signInElsewhere).
        let interactive = request.interactive == true && !judged.identity.isConfined
        let forceRefresh = forcedRefresh(request, account: account, caller: judged)
        if judged.identity.isConfined, !served.ownSignIn, scopes != nil || resource != nil,
           await broker.isNewTokenSet(account: served.account, scopes: scopes, resource: resource),
           let wait = newTokenSets.retryAfter(served.account) {
            let seconds = max(1, Int(wait.components.seconds) + (wait.components.attoseconds > 0 ? 1 : 0))
            throw WireError(.agentBusy, "tokens of \(newTokenSets.perInterval) new scope or resource sets of account '\(account)' were asked for by confined callers within a minute; ask again in \(seconds) s", retryAfter: seconds)
        }
        let grant = try await signInElsewhere(served.account, for: judged) { () async throws(WireError) -> AccessTokenGrant in
          try await translate { () async throws(AuthError) -> AccessTokenGrant in
            if interactive {
                // Announce the sign-in if one is needed, so the caller can show the URL.
                do throws(AuthError) {
                    return try await broker.accessToken(account: served.account, minValid: .seconds(minValid), forceRefresh: forceRefresh,
                                                        scopes: served.ownSignIn ? nil : scopes, resource: resource)
                } catch let error where error.code == .loginRequired {
                    let ticket = try await broker.beginLogin(account: served.account, method: method)
                    await loginStarted(AgentOperations.event(ticket))
                    _ = try await broker.awaitLogin(ticket)
                }
            }
            return try await broker.accessToken(account: served.account, minValid: .seconds(minValid),
                                                forceRefresh: forceRefresh && !interactive,
                                                scopes: served.ownSignIn ? nil : scopes, resource: resource,
                                                proof: proof)
          }
        }
        try checkProof(judged, account: account, proof: nil, tokenType: grant.tokenType)
        try checkWithinGrant(judged, account: account, given: grant.scopes, scopes: scopes, resource: resource)
        // A Bearer token comes without a proof, whatever was asked: the record names a proof only when one was made.
        access.record(judged, account: account, granted: true, reason: reason, scopes: scopes, resource: resource,
                      proofFor: grant.dpopProof == nil ? nil : proof.map { "\($0.method) \(DPoPKey.target($0.url))" })
        countGrantUse(judged)
        return AgentOperations.tokenResult(grant, includeIDToken: request.idToken ?? false)
    }

    /// Whether the request's `force_refresh` is honoured: always for a program of the desktop; for a confined caller
    /// only within ``forcedRefreshes`` (counted after the access check, so a refused caller uses up nothing).
    func forcedRefresh(_ request: WireRequest, account: String, caller: Caller) -> Bool {
        guard request.forceRefresh == true else { return false }
        guard caller.identity.isConfined, !forcedRefreshes.admit(account) else { return true }
        logger.debug("a confined caller's forced refresh within the limit's interval is served from the cache", metadata: [
            "account": "\(account)", "via": "\(caller.via)", "interval_seconds": "\(forcedRefreshes.interval.components.seconds)"])
        return false
    }

    /// A grant as the versioned result.
    static func tokenResult(_ grant: AccessTokenGrant, includeIDToken: Bool) -> TokenResult {
        TokenResult(
            account: grant.account, accessToken: grant.accessToken.reveal(), tokenType: grant.tokenType,
            expiry: grant.doesNotExpire
                ? .never
                : .after(seconds: Int(grant.expiresIn.components.seconds), unixTime: Int(grant.expiresAt.timeIntervalSince1970)),
            scopes: grant.scopes, idToken: includeIDToken ? grant.idToken?.reveal() : nil,
            dpopProof: grant.dpopProof?.reveal())
    }

    /// Starts (or joins) the account's sign-in, announces it through `loginStarted`, and waits for it. The request's
    /// `browser` (default true) and `method` (default `redirect`) say how.
    public func login(account: String, _ request: WireRequest = WireRequest(op: .login),
                      loginStarted: @Sendable (WireEvent) async -> Void = { _ in }) async throws(WireError) -> LoginResult {
        let method = try AgentOperations.loginMethod(request), browser = request.browser ?? true
        let outcome = try await translate { () async throws(AuthError) -> LoginOutcome in
            let ticket = try await broker.beginLogin(account: account, openBrowser: browser, method: method)
            await loginStarted(AgentOperations.event(ticket))
            return try await broker.awaitLogin(ticket)
        }
        return LoginResult(
            account: outcome.account, subject: outcome.subject, email: outcome.email, name: outcome.name,
            scopes: outcome.scopes, hasRefreshToken: outcome.hasRefreshToken,
            accessTokenExpiresAt: outcome.accessTokenExpiresAt.map { Int($0.timeIntervalSince1970) },
            keptInMemory: outcome.keptInMemory)
    }

    /// Manual paste or a private-use scheme handler: hands the final redirect URL to the account's pending sign-in.
    /// Without an account (`authctl callback`, run by the desktop), the private-use redirect URI names it.
    public func loginCallback(_ request: WireRequest) async throws(WireError) -> LoginCallbackResult {
        guard let url = request.url, !url.isEmpty else { throw WireError(.badRequest, "the 'login_callback' request needs a 'url'") }
        let account = try await translate { () async throws(AuthError) -> String in
            if let account = request.account, !account.isEmpty { return account }
            return try await broker.account(forCallback: url)
        }
        try await translate { () async throws(AuthError) in try await broker.submitRedirect(account: account, url: url) }
        return LoginCallbackResult(account: account, accepted: true)
    }

    public func logout(account: String) async throws(WireError) -> LogoutResult {
        let outcome = try await translate { () async throws(AuthError) -> LogoutOutcome in try await broker.logout(account: account) }
        return LogoutResult(account: outcome.account, hadRefreshToken: outcome.hadRefreshToken,
                            revoked: outcome.revoked, revocationError: outcome.revocationError)
    }

    /// A confined caller (a forwarded host, a sandboxed app) is shown only the accounts it may use, no forwards, and
    /// nothing of the desktop's own (the agent's pid, socket, keyring and store); it is told how the agent sees it.
    public func status(caller: Caller) async -> StatusResult {
        let status = await broker.status()
        let confined = caller.identity.isConfined
        let uptime = ContinuousClock.now - info.startedAt
        let desktop: (_ value: String?) -> String? = { confined ? nil : $0 }
        return StatusResult(
            agent: .init(version: info.version, pid: confined ? nil : info.pid, uptimeSeconds: Int(uptime.components.seconds),
                         socket: desktop(info.socketPath), keyring: desktop(status.keyring.rawValue),
                         keyringService: desktop(status.keyringService?.program),
                         keyringAdvice: desktop(status.keyring.advice(store: status.store, service: status.keyringService)),
                         store: desktop(status.store.rawValue), hostname: info.hostname,
                         sessionLocked: desktop(access.sessionLock.lockedBy)),
            accounts: status.accounts.filter { !GrantSignIn.isGrantSignIn($0.name) && mayLearnOf($0.name, caller: caller) }.map { account in
                StatusResult.Account(
                    name: account.name, issuer: account.issuer, clientID: account.clientID,
                    redirectURI: account.registeredRedirectURI, scopes: account.scopes, signedIn: account.hasRefreshToken,
                    accessTokenExpiresAt: account.accessTokenExpiresAt.map { Int($0.timeIntervalSince1970) },
                    accessTokenExpiresIn: account.accessTokenExpiresIn.map { Int($0.components.seconds) },
                    lastRefresh: account.lastRefresh.map { Int($0.timeIntervalSince1970) },
                    lastError: account.lastError.map {
                        .init(code: AgentOperations.wireCode($0.code).rawValue, message: $0.message, at: Int($0.at.timeIntervalSince1970))
                    },
                    loginPending: account.loginPending,
                    scopedTokens: account.scopedTokens.isEmpty ? nil : account.scopedTokens.map {
                        $0.doesNotExpire
                            ? .init(scopes: $0.scopes, resource: $0.resource, expiresAt: nil, expiresIn: nil, doesNotExpire: true)
                            : .init(scopes: $0.scopes, resource: $0.resource, expiresAt: Int($0.expiresAt.timeIntervalSince1970),
                                    expiresIn: Int($0.expiresIn.components.seconds))
                    },
                    // A grant's caller is served by its grant, not by the account's policy: that is not shown to it.
                    access: caller.identity.grantName == nil ? AccountAccess(access.policy(of: account.name)) : nil,
                    signInValidUntil: account.signInValidUntil.map { Int($0.timeIntervalSince1970) },
                    accessTokenDoesNotExpire: account.accessTokenDoesNotExpire ? true : nil,
                    signInEnded: account.signInValidUntil == nil ? nil : account.signInEnded,
                    keptInMemory: account.keptInMemory ? true : nil, keyringMoveError: account.keyringMoveError,
                    dpop: account.dpop, dpopKey: account.dpopKey)
            },
            forwards: confined ? nil : forwardSummaries(),
            grants: confined ? nil : grantSummaries(),
            view: WireCaller.Kind(caller.identity.kind).rawValue,
            namedBy: caller.identity.grantName ?? (caller.identity.policyExe == nil ? caller.identity.entry : nil))
    }

    /// The request's `method`: `redirect` when absent.
    static func loginMethod(_ request: WireRequest) throws(WireError) -> LoginMethod {
        guard let text = request.method else { return .redirect }
        guard let name = LoginMethodName(rawValue: text), let method = LoginMethod(rawValue: name.rawValue) else {
            throw WireError(.badRequest, "unknown sign-in method '\(String(text.prefix(32)))'; known: \(LoginMethodName.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        return method
    }

    /// `dpop_method` and `dpop_url` go together; `dpop_nonce` only with them.
    static func proofTarget(_ request: WireRequest) throws(WireError) -> (method: String, url: String, nonce: String?)? {
        switch (request.dpopMethod, request.dpopURL) {
        case (let method?, let url?): return (method, url, request.dpopNonce)
        case (nil, nil) where request.dpopNonce == nil: return nil
        default: throw WireError(.badRequest, "a DPoP proof needs both 'dpop_method' and 'dpop_url' ('dpop_nonce' only with them)")
        }
    }

    // MARK: Errors

    /// Runs a broker call and turns its ``AuthError`` into the front ends' ``WireError`` (same code, message and
    /// Retry-After).
    func translate<T>(_ body: () async throws(AuthError) -> T) async throws(WireError) -> T {
        do {
            return try await body()
        } catch {
            throw WireError(AgentOperations.wireCode(error.code), error.message, retryAfter: error.retryAfter,
                            keyringService: error.keyringService, keyringAdvice: error.keyringAdvice)
        }
    }

    /// Domain codes map one-to-one onto wire codes; the test suite checks that every one of them does.
    public static func wireCode(_ code: AuthError.Code) -> ErrorCode {
        ErrorCode(rawValue: code.rawValue) ?? .internalError
    }

    static func event(_ ticket: LoginTicket) -> WireEvent {
        guard let device = ticket.device else {
            return WireEvent(type: WireEvent.loginStarted) {
                $0.url = ticket.authorizationURL.absoluteString; $0.redirectURI = ticket.redirectURI
                $0.browserOpened = ticket.browserOpened; $0.browserError = ticket.browserError
                $0.timeoutSeconds = Int(ticket.timeout.components.seconds)
            }
        }
        return WireEvent(type: WireEvent.deviceCode) {
            $0.url = ticket.authorizationURL.absoluteString; $0.browserOpened = false; $0.timeoutSeconds = device.expiresIn
            $0.userCode = device.userCode; $0.verificationURI = device.verificationURI.absoluteString
            $0.verificationURIComplete = device.verificationURIComplete?.absoluteString
            $0.expiresIn = device.expiresIn; $0.interval = device.interval
        }
    }
}
