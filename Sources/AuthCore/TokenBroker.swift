import FoundationEssentials
import Logging

/// The heart of the agent: per-account token cache, single-flight refresh, sign-in and sign-out.
///
/// Everything here talks to the world only through ports (``SecretStore``, ``HTTPTransport``,
/// ``RedirectListenerFactory``, ``BrowserLauncher``, ``TimeSource``), so the socket server and any future
/// D-Bus front end share one implementation, and the logic is tested with in-memory adapters.
public actor TokenBroker {
    struct AccountState {
        var config: AccountConfig
        /// The default access token.
        var cache: CachedToken?
        /// Access tokens for a scope subset and/or resource (served like the default one).
        var scoped: [TokenCacheKey: CachedToken] = [:]
        /// The single flight of each entry's refresh (the default entry's key is ``TokenCacheKey/default``).
        var refreshes: [TokenCacheKey: Task<CachedToken, Error>] = [:]
        /// The account's refresh rules and failures: backoff, last error (``RefreshMachine``).
        var refresh: RefreshMachine
        /// The account's sign-in: pending, joined, ended, rate-limited (TokenBroker+SignIn.swift).
        var signIn: SignInCoordinator<SignInFlow>
        var lastRefresh: Date?
        /// When a caller last asked for a token: only recently used accounts are refreshed proactively.
        var lastUsed: ContinuousClock.Instant?
        /// The claims of the last verified ID token: a refreshed one must name the same iss/sub/aud/azp.
        var idClaims: IDTokenClaims?
        /// The sign-in's DPoP key (RFC 9449), as signed in or read with the refresh token; nil without DPoP.
        var proofKey: DPoPKey?
        /// With `dpop = "auto"`, the server refused this client's proof at sign-in, which went on without DPoP.
        var dpopRefused = false
        /// When the sign-in ends (TokenBroker+Lifetime.swift).
        var lifetime = LifetimeRecord()
        /// This state's identity: a reload that resets or removes the account replaces the state, and work begun for
        /// the old one (a refresh or sign-in under the old settings) no longer writes into the new one.
        let epoch = UUID()

        init(config: AccountConfig, policy: RefreshPolicy, loginLimit: LoginRateLimit) {
            self.config = config
            self.refresh = RefreshMachine(policy: policy)
            self.signIn = SignInCoordinator(limit: loginLimit)
        }

        /// The cached entry for `key`: the default token or a scoped one.
        func cached(_ key: TokenCacheKey) -> CachedToken? { key.isDefault ? cache : scoped[key] }

        /// Scoped entries kept at most per account: each is refreshed ahead of expiry while the account is in use.
        /// A new one beyond that replaces the one that expires first.
        static let maxScoped = 32

        mutating func setCached(_ key: TokenCacheKey, _ value: CachedToken?) {
            if key.isDefault { return cache = value }
            if value != nil, scoped[key] == nil, scoped.count >= AccountState.maxScoped,
               let first = scoped.min(by: { $0.value.tokens.expiresAt < $1.value.tokens.expiresAt })?.key {
                scoped[first] = nil
            }
            scoped[key] = value
        }

        /// Every cached entry, the default one first, then the scoped ones in a stable order.
        var entries: [(key: TokenCacheKey, cached: CachedToken)] {
            (cache.map { [(TokenCacheKey.default, $0)] } ?? [])
                + scoped.sorted { $0.key.description < $1.key.description }.map { ($0.key, $0.value) }
        }
    }

    /// Where each credential is, and the one way to read and write it (``CredentialStore``).
    let keyring: CredentialStore
    let http: any HTTPTransport
    let redirects: any RedirectListenerFactory
    let browser: any BrowserLauncher
    let time: any TimeSource
    /// The broker's clock, for the front ends' own time rules (``TokenEndpointLimit``), so they run on the same time.
    public nonisolated var clock: any TimeSource { time }
    let policy: RefreshPolicy
    let random: @Sendable () -> Double
    let loginLimit: LoginRateLimit
    let logger: Logger
    /// Each account's provider metadata and signing keys.
    let providers: ProviderDirectory
    var accounts: [String: AccountState]
    var accountOrder: [String]
    /// The grants' sign-ins of their own (TokenBroker+GrantSignIn.swift), by their account name.
    var grantSignIns: [String: GrantSignIn] = [:]
    /// Each keyring item's (``SecretKey``) turn to redeem or rewrite its credential (TokenBroker+Redemption.swift):
    /// the item's, not the account's, so a reload that resets or removes the account keeps it, and its work under
    /// way still holds the turn.
    var turns: [SecretKey: CredentialTurn] = [:]
    /// Subscribers of ``events()`` (TokenBroker+Events.swift).
    let eventHub: BrokerEventHub
    /// When logind said the system is about to sleep (TokenBroker+Wake.swift); nil while awake.
    var suspendedAt: ContinuousClock.Instant?
    /// Wakes the proactive refresh loop when a token arrives or an account comes into use (its sleep was computed
    /// without them: a 20 s token would otherwise expire during the loop's 60 s nap).
    let proactiveBell = Doorbell()
    /// Wakes the sign-in lifetime watch when a deadline changes (TokenBroker+Lifetime.swift).
    let lifetimeBell = Doorbell()
    /// The last `DPoP-Nonce` of each authorization server (TokenBroker+TokenEndpoint.swift).
    var dpopNonces: [String: String] = [:]
    /// The TPM that makes and signs with `dpop_key = "tpm"` keys; nil: none configured (tests).
    let keyHolder: (any KeyHolder)?

    public init(accounts: [AccountConfig], store: any SecretStore, storeChoice: StoreChoice = .secretService,
                http: any HTTPTransport,
                redirects: any RedirectListenerFactory, browser: any BrowserLauncher,
                time: any TimeSource = SystemTimeSource(), policy: RefreshPolicy = RefreshPolicy(),
                random: @escaping @Sendable () -> Double = { Double.random(in: 0..<1) },
                loginLimit: LoginRateLimit = LoginRateLimit(), keyHolder: (any KeyHolder)? = nil, logger: Logger) {
        self.loginLimit = loginLimit
        self.keyHolder = keyHolder
        let events = BrokerEventHub()
        self.eventHub = events
        self.keyring = CredentialStore(store: store, choice: storeChoice, time: time,
                                       probeLimit: TokenBroker.keyringProbeLimit, logger: logger, events: events)
        self.http = http
        self.redirects = redirects
        self.browser = browser
        self.time = time
        self.policy = policy
        self.random = random
        self.logger = logger
        self.providers = ProviderDirectory(http: http, time: time, logger: logger)
        self.accountOrder = accounts.map(\.name)
        self.accounts = Dictionary(uniqueKeysWithValues: accounts.map { ($0.name, AccountState(config: $0, policy: policy, loginLimit: loginLimit)) })
    }

    // MARK: Tokens

    /// Whether a token request for these scopes and resource would need a token of a set not cached now (a refresh
    /// of its own): false for the account's default token, and for a request its checks will refuse anyway.
    public func isNewTokenSet(account name: String, scopes: [String]?, resource: String?) -> Bool {
        guard let state = accounts[name],
              let key = try? TokenCacheKey(scopes: scopes, resource: resource, account: state.config), !key.isDefault else {
            return false
        }
        return state.cached(key) == nil && state.refreshes[key] == nil
    }

    /// A token valid for at least `minValid`, or the freshest the server gives when its tokens live shorter
    /// (``RefreshPolicy/isFresh(expiresAt:lifetime:now:minValid:)``; the grant carries the real expiry).
    /// `scopes` (a subset of the account's) and `resource` (RFC 8707) select a separately cached entry
    /// (served like the default one). The account's ``RefreshMachine`` decides (serve the cache, join or start the
    /// entry's one refresh, wait out a backoff); this executes it. A missing sign-in is `login_required`: starting one
    /// is the caller's (`AgentOperations.token`, for `--interactive`).
    /// With `proof`, a DPoP-bound token comes with a proof for that request, made with the key the token is bound to
    /// in the same step (the token and its proof always match).
    public func accessToken(account name: String, minValid: Duration = .zero, forceRefresh: Bool = false,
                            scopes: [String]? = nil, resource: String? = nil,
                            proof: ProofTarget? = nil) async throws(AuthError) -> AccessTokenGrant {
        var state = try self.state(name)
        let key = try TokenCacheKey(scopes: scopes, resource: resource, account: state.config)
        noteUse(name, time.now())
        var waited = false
        decide: while true {
            let cached = state.cached(key)
            let action = state.refresh.request(cached: cached, refreshing: state.refreshes[key] != nil, now: time.now(),
                                               minValid: minValid, forceRefresh: forceRefresh)
            switch (action, cached) {
            case (.serve(let refreshBehind), let cached?):
                // Stale-while-revalidate: a token inside its early-refresh margin is still served at once, and the
                // refresh happens behind it, so the next caller finds a fresh one.
                if refreshBehind { Task { _ = try? await self.refreshOnce(name, key) } }
                return try await grant(name, key, cached, proof: proof)
            case (.serveDuringBackoff, let cached?):
                return try await grant(name, key, cached, proof: proof)
            case (.waitOut(let wait), _):
                // The server failed moments ago: a caller waits the rest of that short interval and then asks it
                // (or joins whoever does), so a server that is back serves it; a longer wait (Retry-After) fails now.
                guard !waited, wait <= policy.demandRetry else { throw backoffError(state.refresh.lastError, wait: wait) }
                waited = true
                do { try await time.sleep(for: wait) } catch { throw backoffError(state.refresh.lastError, wait: wait) }
                state = try self.state(name)
            default:
                break decide
            }
        }
        let refreshed: CachedToken
        do throws(AuthError) {
            refreshed = try await refreshOnce(name, key)
        } catch {
            // The account may have been removed by a reload meanwhile: the refresh's own error stands then.
            guard let state = accounts[name] else { throw error }
            switch state.refresh.recover(from: error, cached: state.cached(key), now: time.now(),
                                         forceRefresh: forceRefresh) {
            case .serveCached:
                guard let cached = state.cached(key) else { throw error }
                logger.notice("serving a cached token while the authorization server is unavailable",
                              metadata: ["account": "\(name)", "entry": "\(key)", "error_code": "\(error.code.rawValue)"])
                return try await grant(name, key, cached, proof: proof)
            case .fail:
                throw error
            }
        }
        try requireValidity(refreshed, minValid: minValid)
        return try await grant(name, key, refreshed, proof: proof)
    }

    /// While the account backs off after a transient failure: the last failure, and when the next attempt may be.
    func backoffError(_ last: RecordedError?, wait: Duration) -> AuthError {
        let (whole, fraction) = wait.components
        let seconds = max(1, Int(whole) + (fraction > 0 ? 1 : 0))
        return AuthError(last?.code ?? .serverUnreachable,
                         "\(last?.message ?? "the authorization server is unavailable"); next attempt in \(seconds) s",
                         retryAfter: seconds)
    }

    /// A just-refreshed token is the freshest the server gives, so it satisfies any `minValid` (``RefreshPolicy``'s
    /// one rule); it fails only when the server's tokens live shorter than the agent's own minimum.
    func requireValidity(_ refreshed: CachedToken, minValid: Duration) throws(AuthError) {
        guard policy.isFresh(expiresAt: refreshed.tokens.expiresAt, lifetime: refreshed.tokens.lifetime, now: time.now(),
                             minValid: minValid) else {
            throw AuthError(.minValidUnsatisfiable,
                "the server issues tokens valid for \(refreshed.tokens.lifetime.components.seconds) s, less than the \(policy.minimumRemaining.components.seconds) s the agent needs to hand one out")
        }
    }

    /// Single flight per entry: every caller that needs a refresh of it while one is running waits for that one.
    func refreshOnce(_ name: String, _ key: TokenCacheKey = .default) async throws(AuthError) -> CachedToken {
        let task: Task<CachedToken, Error>
        if let running = accounts[name]?.refreshes[key] {
            task = running
        } else {
            task = Task { try await self.performRefresh(name, entry: key) }
            accounts[name]?.refreshes[key] = task
            if key.isDefault { publish(.refreshStarted(name)) }
        }
        do {
            let result = try await task.value
            clearRefresh(name, key, task)
            return result
        } catch {
            clearRefresh(name, key, task)
            throw TokenBroker.authError(error)
        }
    }

    private func clearRefresh(_ name: String, _ key: TokenCacheKey, _ task: Task<CachedToken, Error>) {
        guard accounts[name]?.refreshes[key] == task else { return }
        accounts[name]?.refreshes[key] = nil
        if key.isDefault { publish(.refreshFinished(name)) }
    }

    // MARK: Proactive refresh: TokenBroker+Proactive.swift; the refresh itself: TokenBroker+Refresh.swift

    // MARK: Sign-in: TokenBroker+SignIn.swift (over SignInCoordinator); sign-out: TokenBroker+SignOut.swift

    // MARK: Shutdown

    /// Cancels pending sign-ins and waits (up to `timeout`) for running refreshes, so a rotated refresh token that
    /// the server already issued is in the keyring before the process exits; also for every keyring item's turn
    /// that is taken (TokenBroker+Redemption.swift): a refresh of an account a reload reset or removed, a sign-in's
    /// or sign-out's write.
    public func drain(timeout: Duration = .seconds(10)) async {
        let refreshes = accounts.values.flatMap { $0.refreshes.values }
        let busy = turns.filter { $0.value.taken }.map(\.key)
        for state in accounts.values { state.signIn.pending?.flow.completion.cancel() }
        // Said as it happens, so whoever reads the journal after a restart knows why the account is signed out.
        for name in await accountsInMemory {
            logger.warning("stopping: the sign-in kept in memory only is lost", metadata: ["account": "\(name)"])
        }
        guard !refreshes.isEmpty || !busy.isEmpty else { return }
        logger.info("waiting for refreshes in flight", metadata: ["count": "\(max(refreshes.count, busy.count))"])
        let time = self.time
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                for task in refreshes { _ = try? await task.value }
                for key in busy {
                    await self.acquireRedemption(key)
                    await self.releaseRedemption(key)
                }
            }
            group.addTask { try? await time.sleep(for: timeout) }
            await group.next()
            group.cancelAll()
        }
    }

    // MARK: Status: TokenBroker+Status.swift

    /// Every credential write goes through these two, which write the sign-in's dates beside the credential
    /// (where it goes, and what a refusal does, is the ``CredentialStore``'s).
    @discardableResult
    func storeRefreshToken(_ secret: Secret, for key: SecretKey,
                           as kind: CredentialStore.Write = .rewrite) async throws(AuthError) -> StoredIn {
        try await keyring.write(itemForKeyring(secret, account: key.account), for: key, as: kind)
    }

    @discardableResult
    func deleteRefreshToken(_ key: SecretKey) async throws(AuthError) -> Bool {
        forgetDeadline(key.account)
        return try await keyring.delete(key)
    }

    /// The configured accounts, in the configuration's order (not the grants' sign-ins of their own).
    public var accountNames: [String] { accountOrder.filter { !GrantSignIn.isGrantSignIn($0) } }



    public static let keyringProbeLimit: Duration = .seconds(2)

    // MARK: Helpers

    func state(_ name: String) throws(AuthError) -> AccountState {
        guard let state = accounts[name] else { throw AuthError.unknownAccount(name) }
        return state
    }

    func metadata(for name: String) async throws(AuthError) -> ProviderMetadata {
        try await providers.metadata(for: try state(name).config)
    }

    /// Public clients send `client_id` in the body; confidential ones use client_secret_basic unless the server
    /// (or the account) says client_secret_post.
    func clientAuthentication(_ config: AccountConfig, _ metadata: ProviderMetadata,
                                      into fields: inout [(String, String)]) -> (user: String, password: Secret)? {
        guard let secret = config.clientSecret else {
            fields.append(("client_id", config.clientID))
            return nil
        }
        let method = config.clientAuthMethod
            ?? (metadata.tokenEndpointAuthMethods.contains("client_secret_basic") || metadata.tokenEndpointAuthMethods.isEmpty
                ? .clientSecretBasic : .clientSecretPost)
        if method == .clientSecretPost {
            fields.append(("client_id", config.clientID))
            fields.append(("client_secret", secret.reveal()))
            return nil
        }
        // RFC 6749 §2.3.1: both parts are form-encoded before being joined.
        return (LoginSession.formEncode(config.clientID), Secret(LoginSession.formEncode(secret.reveal())))
    }

    /// What a caller gets for a cached entry. A scoped entry whose grant named no scopes has the ones asked for.
    /// With `proof`, a DPoP token gets its proof here, from the key the account's sign-in holds now, which is the
    /// key the cached token was issued to (both change together, with no suspension between: the key is taken with
    /// the token before the signature, which a TPM-held key makes while the broker serves others).
    func grant(_ name: String, _ key: TokenCacheKey, _ cached: CachedToken,
               proof target: ProofTarget? = nil) async throws(AuthError) -> AccessTokenGrant {
        let remaining = cached.tokens.expiresAt - time.now()
        var grant = AccessTokenGrant(
            account: name, accessToken: cached.tokens.accessToken, tokenType: cached.tokens.tokenType,
            expiresIn: remaining, expiresAt: TokenBroker.wallClockInstant(time.wallClock(), plus: remaining),
            scopes: cached.tokens.scopes ?? key.scopes ?? accounts[name]?.config.scopes, idToken: cached.tokens.idToken,
            doesNotExpire: cached.tokens.nonExpiring)
        if let target, cached.tokens.tokenType == "DPoP" {
            guard let proofKey = accounts[name]?.proofKey else {
                throw AuthError.internalError("the DPoP key of '\(name)' is not loaded")
            }
            grant.dpopProof = try await proofKey.proof(method: target.method, url: target.url,
                                                       accessToken: cached.tokens.accessToken, nonce: target.nonce,
                                                       issuedAt: time.wallClock(), holder: keyHolder)
        }
        return grant
    }

    /// Caches newly issued tokens for an entry (without the refresh token, which lives only in the keyring), with
    /// their own jitter of the early-refresh moment, and marks the account healthy. Shared by sign-in and refresh.
    /// The tokens as served from the cache; kept in the account's cache unless `keep` is false (a refresh whose
    /// account a reload reset: its callers get the token, the new state does not).
    func cacheTokens(_ name: String, _ key: TokenCacheKey, _ tokens: TokenSet, keep: Bool = true) -> CachedToken {
        var tokens = capped(name, tokens)
        tokens.refreshToken = nil
        let cached = CachedToken(tokens: tokens, jitter: random())
        guard keep else { return cached }
        accounts[name]?.setCached(key, cached)
        if key.isDefault { accounts[name]?.lastRefresh = time.wallClock() }
        accounts[name]?.refresh.clearFailures()
        proactiveBell.ring()
        return cached
    }

    /// `now + remaining` with the sub-second part kept, so the wall-clock expiry of one token is the same instant on
    /// every call (truncating `remaining` made `expires_at` differ by a second between two calls).
    static func wallClockInstant(_ now: Date, plus remaining: Duration) -> Date {
        let parts = remaining.components
        return now.addingTimeInterval(Double(parts.seconds) + Double(parts.attoseconds) / 1e18)
    }

    /// A sign-in `cancelled` (logout, its last caller gone, a reload) fails as such, whatever its step said.
    static func authError(_ error: any Error, cancelled: Bool = false) -> AuthError {
        if cancelled || error is CancellationError { return AuthError(.loginCancelled, "the sign-in was cancelled") }
        if let error = error as? AuthError { return error }
        return AuthError.internalError("unexpected error: \(type(of: error))")
    }
}
