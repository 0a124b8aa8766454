#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Logging

/// The heart of the agent: per-account token cache, single-flight refresh, sign-in and sign-out.
///
/// Everything here talks to the world only through ports (``SecretStore``, ``HTTPTransport``,
/// ``RedirectListenerFactory``, ``BrowserLauncher``, ``TimeSource``), so the socket server and any future
/// D-Bus front end share one implementation, and the logic is tested with in-memory adapters.
public actor TokenBroker {
    struct CachedToken: Sendable {
        var tokens: TokenSet
        /// Spreads this entry's early-refresh moment (scoped entries; the default one uses `refreshJitter`).
        var jitter = 0.0
        /// Set after a resume from suspend (``markStale(_:)``): not served until refreshed, except during an outage.
        var stale = false
    }

    struct AccountState {
        var config: AccountConfig
        /// Where ``cache`` is published for the front ends' synchronous fast path (``TokenSnapshot``).
        let snapshot: TokenSnapshot
        /// The default access token. Every change, wherever it is made, is published to ``snapshot``.
        var cache: CachedToken? { didSet { publishSnapshot() } }
        var refresh: Task<CachedToken, Error>?
        /// Access tokens for a scope subset and/or resource (TokenBroker+Scopes.swift), and their single flights.
        var scoped: [TokenCacheKey: CachedToken] = [:]
        var scopedRefresh: [TokenCacheKey: Task<CachedToken, Error>] = [:]
        /// One refresh-token redemption at a time per account, so a rotated token is stored before the next use.
        var redeeming = false
        var redeemWaiters: [CheckedContinuation<Void, Never>] = []
        /// The account's sign-in: pending, joined, ended, rate-limited (TokenBroker+SignIn.swift).
        var signIn: SignInCoordinator<SignInFlow>
        var lastRefresh: Date?
        var lastError: RecordedError?
        /// A rotated refresh token the keyring refused to take; used (and saved) on the next refresh.
        var unsavedRefreshToken: Secret?
        /// When a caller last asked the broker for a token (``lastUse`` adds the fast path's use): only recently
        /// used accounts are refreshed proactively.
        var lastUsed: ContinuousClock.Instant?
        /// Consecutive transient failures, and the earliest moment the server may be asked again.
        var failures = 0
        var retryNotBefore: ContinuousClock.Instant?
        /// The entry whose refresh failed last (retried at once when the network comes back, TokenBroker+Wake.swift).
        var failedEntry: TokenCacheKey?
        /// Per-token jitter for the early-refresh moment, fixed when the token arrives, before ``cache`` is set (so
        /// the snapshot is published with it).
        var refreshJitter = 0.0
        /// The claims of the last verified ID token: a refreshed one must name the same iss/sub/aud/azp.
        var idClaims: IDTokenClaims?
        /// When the sign-in ends (TokenBroker+Lifetime.swift).
        var lifetime = LifetimeRecord()

        init(config: AccountConfig, snapshot: TokenSnapshot, loginLimit: LoginRateLimit) {
            self.config = config
            self.snapshot = snapshot
            self.signIn = SignInCoordinator(limit: loginLimit)
        }

        /// The pending sign-in's flow, if one is pending (TokenBroker+Lifetime.swift asks).
        var login: SignInFlow? { signIn.pending?.flow }

        /// The one publish point: the snapshot always holds what ``cache`` holds.
        private func publishSnapshot() {
            // A stale token (after a resume, TokenBroker+Wake.swift) is withdrawn from the fast path too.
            snapshot.publish(config.name, cache.flatMap { cached in
                guard !cached.stale else { return nil }
                return TokenSnapshot.Entry(
                    accessToken: cached.tokens.accessToken, tokenType: cached.tokens.tokenType,
                    scopes: cached.tokens.scopes ?? config.scopes, expiresAt: cached.tokens.expiresAt,
                    lifetime: cached.tokens.lifetime, doesNotExpire: cached.tokens.nonExpiring,
                    refreshAt: snapshot.policy.refreshAt(receivedAt: cached.tokens.receivedAt,
                                                         lifetime: cached.tokens.lifetime, jitter: refreshJitter),
                    generation: 0, attachment: nil)
            })
        }

        /// The last time a caller asked for this account's token, through the broker or the snapshot's fast path.
        var lastUse: ContinuousClock.Instant? {
            switch (lastUsed, snapshot.lastUse(config.name)) {
            case let (broker?, fast?): return max(broker, fast)
            case let (broker, fast): return broker ?? fast
            }
        }
    }

    let store: any SecretStore
    let http: any HTTPTransport
    let redirects: any RedirectListenerFactory
    let browser: any BrowserLauncher
    let time: any TimeSource
    let policy: RefreshPolicy
    let random: @Sendable () -> Double
    let loginLimit: LoginRateLimit
    let logger: Logger
    /// Each account's provider metadata and signing keys.
    let providers: ProviderDirectory
    var accounts: [String: AccountState]
    var accountOrder: [String]
    /// Subscribers of ``events()`` (TokenBroker+Events.swift).
    let eventHub = BrokerEventHub()
    /// When logind said the system is about to sleep (TokenBroker+Wake.swift); nil while awake.
    var suspendedAt: ContinuousClock.Instant?
    /// The keyring probe of a `status` under way, shared by every `status` that arrives while it runs; dropped by
    /// any keyring write, so a `status` asked after a write never gets an answer read before it.
    var keyringProbe: Task<KeyringView, Never>?
    /// Wakes the proactive refresh loop when a token arrives or an account comes into use (its sleep was computed
    /// without them: a 20 s token would otherwise expire during the loop's 60 s nap). The snapshot's bell, so a
    /// first use through the socket's fast path wakes it too.
    nonisolated var proactiveBell: Doorbell { snapshot.useBell }
    /// Wakes the sign-in lifetime watch when a deadline changes (TokenBroker+Lifetime.swift).
    let lifetimeBell = Doorbell()
    /// Every account's cached default token, published on each change, for synchronous readers (the socket fast path).
    public nonisolated let snapshot: TokenSnapshot

    public init(accounts: [AccountConfig], store: any SecretStore, http: any HTTPTransport,
                redirects: any RedirectListenerFactory, browser: any BrowserLauncher,
                time: any TimeSource = SystemTimeSource(), policy: RefreshPolicy = RefreshPolicy(),
                random: @escaping @Sendable () -> Double = { Double.random(in: 0..<1) },
                loginLimit: LoginRateLimit = LoginRateLimit(), logger: Logger) {
        self.loginLimit = loginLimit
        self.store = store
        self.http = http
        self.redirects = redirects
        self.browser = browser
        self.time = time
        self.policy = policy
        self.random = random
        self.logger = logger
        self.providers = ProviderDirectory(http: http, time: time, logger: logger)
        self.accountOrder = accounts.map(\.name)
        let snapshot = TokenSnapshot(policy: policy, time: time)
        self.snapshot = snapshot
        self.accounts = Dictionary(uniqueKeysWithValues: accounts.map { ($0.name, AccountState(config: $0, snapshot: snapshot, loginLimit: loginLimit)) })
    }

    // MARK: Tokens

    /// A token valid for at least `minValid`, or the freshest the server gives when its tokens live shorter
    /// (``RefreshPolicy/isFresh(expiresAt:lifetime:now:minValid:)``; the grant carries the real expiry). Serves the
    /// cache when it can; otherwise joins or starts the one refresh for this account. With `interactive`, a missing sign-in starts (or joins) a browser sign-in.
    /// `scopes` (a subset of the account's) and `resource` (RFC 8707) select a separately cached token.
    public func accessToken(account name: String, minValid: Duration = .zero, forceRefresh: Bool = false,
                            interactive: Bool = false, scopes: [String]? = nil,
                            resource: String? = nil) async throws(AuthError) -> AccessTokenGrant {
        let state = try self.state(name)
        let key = try TokenCacheKey(scopes: scopes, resource: resource, account: state.config)
        if !key.isDefault {
            return try await scopedAccessToken(name, key, minValid: minValid, forceRefresh: forceRefresh,
                                               interactive: interactive)
        }
        let now = time.now()
        noteUse(name, now)
        if !forceRefresh, let cached = state.cache, isServable(cached, now: now, minValid: minValid) {
            // Stale-while-revalidate: a token inside its early-refresh margin is still served at once, and the
            // refresh happens behind it, so the next caller finds a fresh one.
            if now >= policy.refreshAt(receivedAt: cached.tokens.receivedAt, lifetime: cached.tokens.lifetime,
                                       jitter: state.refreshJitter) {
                refreshInBackground(name)
            }
            return grant(name, cached)
        }
        // After a transient failure the server is not asked again before the backoff ends.
        if !forceRefresh, let notBefore = state.retryNotBefore, now < notBefore, state.refresh == nil {
            if let cached = usableDuringOutage(state) { return grant(name, cached) }
            throw backoffError(state, notBefore: notBefore, now: now)
        }
        let refreshed: CachedToken
        do throws(AuthError) {
            refreshed = try await refreshOnce(name)
        } catch let error where error.code == .loginRequired && interactive {
            let ticket = try await beginLogin(account: name)
            _ = try await awaitLogin(ticket)
            guard let cached = accounts[name]?.cache else { throw AuthError.loginRequired(name) }
            refreshed = cached
        } catch let error where RefreshPolicy.isTransient(error.code) && !forceRefresh {
            // The server or network is down: a token that is still valid beats an error.
            if let state = accounts[name], let cached = usableDuringOutage(state) {
                logger.notice("serving a cached token while the authorization server is unavailable",
                              metadata: ["account": "\(name)", "error_code": "\(error.code.rawValue)"])
                return grant(name, cached)
            }
            throw error
        }
        try requireValidity(refreshed, minValid: minValid)
        return grant(name, refreshed)
    }

    /// While the account backs off after a transient failure: the last failure, and when the next attempt may be.
    func backoffError(_ state: AccountState, notBefore: ContinuousClock.Instant, now: ContinuousClock.Instant) -> AuthError {
        let wait = Int((notBefore - now).components.seconds) + 1
        let last = state.lastError
        return AuthError(last?.code ?? .serverUnreachable,
                         "\(last?.message ?? "the authorization server is unavailable"); next attempt in \(wait) s",
                         retryAfter: wait)
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

    /// Single flight: every caller that needs a refresh while one is running waits for that one.
    func refreshOnce(_ name: String) async throws(AuthError) -> CachedToken {
        let task: Task<CachedToken, Error>
        if let running = accounts[name]?.refresh {
            task = running
        } else {
            task = Task { try await self.performRefresh(name) }
            accounts[name]?.refresh = task
            publish(.refreshStarted(name))
        }
        do {
            let result = try await task.value
            clearRefresh(name, task)
            return result
        } catch {
            clearRefresh(name, task)
            throw TokenBroker.authError(error)
        }
    }

    private func clearRefresh(_ name: String, _ task: Task<CachedToken, Error>) {
        if accounts[name]?.refresh == task {
            accounts[name]?.refresh = nil
            publish(.refreshFinished(name))
        }
    }

    /// Starts the account's refresh without waiting for it (unless one runs already or the backoff forbids it).
    private func refreshInBackground(_ name: String) {
        guard let state = accounts[name], state.refresh == nil else { return }
        if let notBefore = state.retryNotBefore, time.now() < notBefore { return }
        Task { _ = try? await self.refreshOnce(name) }
    }

    /// During an outage a cached token is served as long as it is valid for the policy's minimum.
    func usableDuringOutage(_ state: AccountState) -> CachedToken? {
        guard let cached = state.cache,
              policy.isFresh(expiresAt: cached.tokens.expiresAt, lifetime: cached.tokens.lifetime, now: time.now(),
                             minValid: .zero) else { return nil }
        return cached
    }

    // MARK: Proactive refresh: TokenBroker+Proactive.swift

    /// Redeems the refresh token for the default entry or, with `entry`, a scoped one (TokenBroker+Scopes.swift).
    func performRefresh(_ name: String, entry: TokenCacheKey = .default) async throws(AuthError) -> CachedToken {
        let config = try state(name).config
        let key = SecretKey(config)
        await acquireRedemption(name)
        defer { releaseRedemption(name) }
        do throws(AuthError) {
            let refreshToken: Secret
            if let unsaved = accounts[name]?.unsavedRefreshToken {
                refreshToken = unsaved
            } else if let stored = try await loadRefreshToken(key) {
                refreshToken = stored
            } else {
                throw AuthError.loginRequired(name)
            }
            if case .longLivedAccessToken(let access) = StoredCredential(stored: refreshToken) {
                // Nothing to redeem: the stored access token is the credential (TokenSet.nonExpiring). An item whose
                // dates are still inside the secret is written again in the new form here, as a refresh would.
                var tokens = TokenSet(accessToken: access, lifetime: .seconds(TokenResponseParser.maximumLifetime),
                                      receivedAt: time.now())
                tokens.nonExpiring = true
                await storeMovedDeadline(name, credential: refreshToken, key: key)
                return entry.isDefault ? cacheFreshTokens(name, tokens) : cacheScoped(name, entry, tokens)
            }
            let metadata = try await metadata(for: name)
            var fields = [("grant_type", "refresh_token"), ("refresh_token", refreshToken.reveal())]
                + entry.refreshFields(configuredScopes: config.scopes)
            let basic = clientAuthentication(config, metadata, into: &fields)
            let sentAt = time.now()
            logger.debug("refreshing", metadata: ["account": "\(name)"])
            let reply = try await http.postForm(metadata.tokenEndpoint, fields: fields, basicAuth: basic)
            var tokens: TokenSet
            do throws(AuthError) {
                tokens = try TokenResponseParser.parse(reply, receivedAt: sentAt)
            } catch let error where error.code == .loginRequired {
                try await forgetDeadRefreshToken(name, key: key, sent: refreshToken)
                throw AuthError(.loginRequired, "\(error.message); run `authctl login \(name)`")
            }
            noteRefresh(name, tokens)
            // Rotation: the new refresh token is saved before the old one is forgotten or any access token is used.
            if let rotated = tokens.refreshToken, rotated != refreshToken {
                accounts[name]?.unsavedRefreshToken = rotated
                try await storeRefreshToken(rotated, for: key)
                accounts[name]?.unsavedRefreshToken = nil
            } else if accounts[name]?.unsavedRefreshToken != nil {
                try await storeRefreshToken(refreshToken, for: key)
                accounts[name]?.unsavedRefreshToken = nil
            } else {
                await storeMovedDeadline(name, credential: refreshToken, key: key)
            }
            // OIDC Core §12.2: a refreshed ID token is verified like the first and must name the same user and client.
            // Checked after the rotated refresh token is safe, so a bad ID token costs this access token, not the sign-in.
            if let idToken = tokens.idToken {
                if let claims = try await verifiedIDToken(idToken, account: name, metadata: metadata, nonce: nil,
                                                          original: accounts[name]?.idClaims) {
                    accounts[name]?.idClaims = claims
                } else {
                    tokens.idToken = nil
                }
            }
            if entry.isDefault, tokens.idToken == nil { tokens.idToken = accounts[name]?.cache?.tokens.idToken }
            let cached = entry.isDefault ? cacheFreshTokens(name, tokens) : cacheScoped(name, entry, tokens)
            logger.info("refreshed access token", metadata: ["account": "\(name)", "entry": "\(entry)",
                                                             "expires_in_s": "\(tokens.lifetime.components.seconds)"])
            return cached
        } catch {
            record(name, error)
            if error.code == .loginRequired { publish(.signInRequired(name)) }
            if RefreshPolicy.isTransient(error.code) {
                let failures = (accounts[name]?.failures ?? 0) + 1
                let delay = policy.backoff(failures: failures, retryAfter: error.retryAfter, jitter: random())
                accounts[name]?.failures = failures
                accounts[name]?.retryNotBefore = time.now() + delay
                accounts[name]?.failedEntry = entry
                logger.notice("refresh failed; backing off", metadata: [
                    "account": "\(name)", "error_code": "\(error.code.rawValue)", "failures": "\(failures)",
                    "retry_in_s": "\(delay.components.seconds)"])
            }
            throw error
        }
    }

    /// The stored refresh token, or nil when there truly is none. A locked collection hides its items (a lookup
    /// returns nothing, without an error), so "nothing" is double-checked against the keyring's state: a locked or
    /// absent keyring is reported as such, never as "not signed in" (SECURITY.md 19).
    func loadRefreshToken(_ key: SecretKey) async throws(AuthError) -> Secret? {
        if let item = try await store.loadItem(key) { return credentialFromKeyring(item, account: key.account) }
        switch await store.state() {
        case .locked: throw AuthError.keyringLocked()
        case .absent: throw AuthError.keyringUnavailable("the Secret Service is not running")
        case .available, .error: return nil
        }
    }

    /// `invalid_grant`: delete only the refresh token that was sent, and only if it is still the stored one.
    private func forgetDeadRefreshToken(_ name: String, key: SecretKey, sent: Secret) async throws(AuthError) {
        accounts[name]?.cache = nil
        accounts[name]?.scoped = [:]
        if accounts[name]?.unsavedRefreshToken == sent { accounts[name]?.unsavedRefreshToken = nil }
        if let current = try await store.loadItem(key), StoredCredential.unseal(current.secret).credential == sent {
            try await deleteRefreshToken(key)
            logger.notice("refresh token rejected by the server; deleted it", metadata: ["account": "\(name)"])
            publish(.accountChanged(name))
        }
    }

    // MARK: Sign-in: TokenBroker+SignIn.swift (over SignInCoordinator); sign-out: TokenBroker+SignOut.swift

    // MARK: Shutdown

    /// Cancels pending sign-ins and waits (up to `timeout`) for running refreshes, so a rotated refresh token that
    /// the server already issued is in the keyring before the process exits.
    public func drain(timeout: Duration = .seconds(10)) async {
        let refreshes = accounts.values.compactMap(\.refresh) + accounts.values.flatMap { $0.scopedRefresh.values }
        for state in accounts.values { state.signIn.pending?.flow.completion.cancel() }
        guard !refreshes.isEmpty else { return }
        logger.info("waiting for refreshes in flight", metadata: ["count": "\(refreshes.count)"])
        let time = self.time
        await withTaskGroup(of: Void.self) { group in
            group.addTask { for task in refreshes { _ = try? await task.value } }
            group.addTask { try? await time.sleep(for: timeout) }
            await group.next()
            group.cancelAll()
        }
    }

    // MARK: Status

    /// The agent's view of every account. Keyring probes are bounded (`keyringProbeLimit`), so a keyring that hangs
    /// (an unanswered unlock prompt, a stopped daemon) shows as `error` instead of stalling `status`.
    ///
    /// The keyring is asked twice per probe whatever the number of accounts (its state, then one search of the
    /// items' attributes: no token is loaded), and concurrent `status` calls share one probe.
    public func status() async -> BrokerStatus {
        let keyring = await keyringView()
        var list: [AccountStatus] = []
        for name in accountOrder {
            guard let state = accounts[name] else { continue }
            var hasRefresh = keyring.stored.map { $0.contains(SecretKey(state.config)) }
            if state.unsavedRefreshToken != nil { hasRefresh = true }
            let now = time.now()
            let cache = accounts[name]?.cache
            // A non-expiring token (TokenSet.nonExpiring) shows no expiry rather than one the agent made up.
            let remaining = cache.flatMap { $0.tokens.nonExpiring ? nil : $0.tokens.expiresAt - now }
            list.append(AccountStatus(
                name: name, issuer: state.config.issuer.absoluteString, clientID: state.config.clientID,
                registeredRedirectURI: state.config.registeredRedirectURI, scopes: state.config.scopes,
                hasRefreshToken: hasRefresh,
                accessTokenExpiresAt: remaining.map { TokenBroker.wallClockInstant(time.wallClock(), plus: $0) },
                accessTokenExpiresIn: remaining, accessTokenDoesNotExpire: cache?.tokens.nonExpiring ?? false,
                lastRefresh: accounts[name]?.lastRefresh, lastError: accounts[name]?.lastError,
                loginPending: state.signIn.isPending, gitHosts: state.config.gitHosts,
                scopedTokens: scopedStatus(name), signInValidUntil: state.lifetime.watch.validUntil))
        }
        return BrokerStatus(keyring: keyring.state, accounts: list)
    }

    /// What `status` reports about the keyring: its state and, when it is available, which keys have a token
    /// (nil when the search failed or took too long).
    struct KeyringView: Sendable {
        var state: KeyringState
        var stored: Set<SecretKey>?
    }

    /// The probe under way if there is one, else a new one. Each step is bounded by `keyringProbeLimit`.
    func keyringView() async -> KeyringView {
        if let running = keyringProbe { return await running.value }
        let store = self.store, time = self.time
        let task = Task {
            let state = await TokenBroker.within(TokenBroker.keyringProbeLimit, on: time, fallback: .error) { await store.state() }
            guard state == .available else { return KeyringView(state: state, stored: nil) }
            let stored = await TokenBroker.within(TokenBroker.keyringProbeLimit, on: time, fallback: nil) { () async -> Set<SecretKey>? in
                try? await store.storedKeys()
            }
            return KeyringView(state: state, stored: stored)
        }
        keyringProbe = task
        let view = await task.value
        if keyringProbe == task { keyringProbe = nil }
        return view
    }

    /// Every keyring write goes through these two, which retire a shared `status` probe that began before them.
    func storeRefreshToken(_ secret: Secret, for key: SecretKey) async throws(AuthError) {
        defer { keyringProbe = nil }
        try await store.store(itemForKeyring(secret, account: key.account), for: key)
    }

    @discardableResult
    func deleteRefreshToken(_ key: SecretKey) async throws(AuthError) -> Bool {
        defer { keyringProbe = nil }
        forgetDeadline(key.account)
        return try await store.delete(key)
    }

    public var accountNames: [String] { accountOrder }

    public static let keyringProbeLimit: Duration = .seconds(2)

    /// `body`'s result, or `fallback` if it takes longer than `limit` on `time` (the body is then cancelled).
    static func within<T: Sendable>(_ limit: Duration, on time: any TimeSource, fallback: T,
                                    _ body: @escaping @Sendable () async -> T) async -> T {
        await withTaskGroup(of: T?.self) { group in
            group.addTask { await body() }
            group.addTask {
                try? await time.sleep(for: limit)
                return nil
            }
            let first = await group.next() ?? nil
            group.cancelAll()
            return first ?? fallback
        }
    }

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

    func grant(_ name: String, _ cached: CachedToken) -> AccessTokenGrant {
        let remaining = cached.tokens.expiresAt - time.now()
        return AccessTokenGrant(
            account: name, accessToken: cached.tokens.accessToken, tokenType: cached.tokens.tokenType,
            expiresIn: remaining, expiresAt: TokenBroker.wallClockInstant(time.wallClock(), plus: remaining),
            scopes: cached.tokens.scopes ?? accounts[name]?.config.scopes, idToken: cached.tokens.idToken,
            doesNotExpire: cached.tokens.nonExpiring)
    }

    /// Caches newly issued tokens (without the refresh token, which lives only in the keyring) and clears the
    /// account's failure state. Shared by sign-in and refresh.
    func cacheFreshTokens(_ name: String, _ tokens: TokenSet) -> CachedToken {
        var tokens = tokens
        tokens.refreshToken = nil
        let cached = CachedToken(tokens: tokens)
        // Jitter first, so the token is published with its own early-refresh moment.
        accounts[name]?.refreshJitter = random()
        accounts[name]?.cache = cached
        accounts[name]?.lastRefresh = time.wallClock()
        accounts[name]?.lastError = nil
        accounts[name]?.failures = 0
        accounts[name]?.retryNotBefore = nil
        accounts[name]?.failedEntry = nil
        proactiveBell.ring()
        return cached
    }

    /// `now + remaining` with the sub-second part kept, so the wall-clock expiry of one token is the same instant on
    /// every call (truncating `remaining` made `expires_at` differ by a second between two calls).
    static func wallClockInstant(_ now: Date, plus remaining: Duration) -> Date {
        let parts = remaining.components
        return now.addingTimeInterval(Double(parts.seconds) + Double(parts.attoseconds) / 1e18)
    }

    func record(_ name: String, _ error: AuthError) {
        accounts[name]?.lastError = RecordedError(code: error.code, message: error.message, at: time.wallClock())
    }

    static func authError(_ error: any Error) -> AuthError {
        if let error = error as? AuthError { return error }
        if error is CancellationError { return AuthError(.loginCancelled, "the sign-in was cancelled") }
        return AuthError.internalError("unexpected error: \(type(of: error))")
    }
}
