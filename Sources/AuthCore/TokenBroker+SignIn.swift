import FoundationEssentials
import Logging

/// The sign-in lifecycle, from the broker's side: it asks each account's ``SignInCoordinator`` what to do (start,
/// join, refuse, cancel, collect a result, announce the end) and does it. The methods themselves live beside:
/// browser, paste and private-use scheme in TokenBroker+Redirect.swift, the device grant and the choice between the
/// two in TokenBroker+Device.swift.
extension TokenBroker {
    /// One running sign-in: the task that starts it (its ticket), and the task that waits for its result.
    struct SignInFlow: Sendable {
        let start: Task<LoginStart, Error>
        let completion: Task<LoginOutcome, Error>
    }

    /// How a pending sign-in reaches its result: a redirect (loopback or pasted) or device polling.
    enum LoginStart: Sendable {
        case redirect(RedirectStart)
        case device(DeviceStart)

        var ticket: LoginTicket {
            switch self {
            case .redirect(let start): return start.ticket
            case .device(let start): return start.ticket
            }
        }
    }

    /// Starts a sign-in for the account, or joins the one already pending. Each caller must later call
    /// ``awaitLogin(_:)``; a caller that goes away (task cancelled) releases its interest, and the sign-in is
    /// cancelled when nobody waits for it any more.
    /// With `openBrowser` false the browser is not started (manual paste); it only matters to the caller that
    /// starts the sign-in, a caller that joins gets the pending one as it is.
    /// `method` picks the redirect or the device grant (``LoginMethod``).
    public func beginLogin(account name: String, openBrowser: Bool = true,
                           method: LoginMethod = .redirect) async throws(AuthError) -> LoginTicket {
        let config = try state(name).config
        // Before anyone is sent to the browser or given a device code: the refresh token a sign-in ends with must
        // have somewhere to go, and a locked store says so now rather than after the user signed in.
        try await keyring.requireUnlocked()
        let now = time.now()
        let action = accounts[name]?.signIn.begin(now: now)
        let pending: SignInCoordinator<SignInFlow>.Pending
        switch action {
        case .start?:
            let id = UUID()
            let start = Task { try await self.startSignIn(config, id: id, openBrowser: openBrowser, method: method) }
            let flow = SignInFlow(start: start, completion: Task { try await self.runSignIn(name, id: id, start: start) })
            pending = accounts[name]!.signIn.started(id: id, method: method, now: now, flow: flow)
            publish(.signInStarted(name))
        case .join(let joined)?:
            pending = joined
        case .refuse(let failures, let wait)?:
            var seconds = Int(wait.components.seconds)
            if wait.components.attoseconds > 0 { seconds += 1 }
            logger.notice("sign-in refused: too many recent failures", metadata: ["account": "\(name)", "retry_in_s": "\(seconds)"])
            throw AuthError(.loginRateLimited,
                "\(failures) sign-ins of '\(name)' failed recently; the next one may start in \(seconds) s",
                retryAfter: seconds)
        case nil:
            throw AuthError.unknownAccount(name)
        }
        do {
            let start = try await pending.flow.start.value
            guard case .join = action else { return start.ticket }
            return try await freshTicket(start, config)
        } catch {
            leaveSignIn(name, id: pending.id)
            throw TokenBroker.authError(error, cancelled: pending.flow.start.isCancelled)
        }
    }

    /// Waits for the pending sign-in that `ticket` came from.
    public func awaitLogin(_ ticket: LoginTicket) async throws(AuthError) -> LoginOutcome {
        let name = ticket.account
        let id = ticket.loginID
        do {
            switch accounts[name]?.signIn.wait(for: id) ?? .gone {
            case .wait(let flow):
                return try await withTaskCancellationHandler {
                    try await flow.completion.value
                } onCancel: {
                    Task { await self.leaveSignIn(name, id: id) }
                }
            case .collect(let flow):
                // The sign-in this ticket came from has ended already: report its own result.
                return try await flow.completion.value
            case .gone:
                throw AuthError(.loginCancelled, "the sign-in this request waited for is no longer pending")
            }
        } catch {
            throw TokenBroker.authError(error)
        }
    }

    private func leaveSignIn(_ name: String, id: UUID) {
        guard case .cancel(let flow)? = accounts[name]?.signIn.leave(id: id) else {
            logger.debug("a caller stopped waiting for the sign-in", metadata: ["account": "\(name)"])
            return
        }
        logger.info("sign-in cancelled: nobody is waiting for it", metadata: ["account": "\(name)"])
        flow.completion.cancel()
    }

    /// The completion task of sign-in `id`: runs it to its end, records a failure (for `status` and the rate limit),
    /// and tells the coordinator how it ended.
    private func runSignIn(_ name: String, id: UUID, start: Task<LoginStart, Error>) async throws -> LoginOutcome {
        do {
            let outcome = try await completeSignIn(name, start: start)
            endSignIn(name, id: id, .signedIn)
            await storeUnsavedWarning(name)
            return outcome
        } catch {
            let failure = TokenBroker.authError(error, cancelled: Task.isCancelled)
            accounts[name]?.refresh.recordError(failure, at: time.wallClock())
            logger.notice("sign-in failed", metadata: ["account": "\(name)", "error_code": "\(failure.code.rawValue)"])
            endSignIn(name, id: id, .init(failure.code))
            await storeUnsavedWarning(name)
            throw failure
        }
    }

    private func endSignIn(_ name: String, id: UUID, _ result: SignInCoordinator<SignInFlow>.Result) {
        if case .announce? = accounts[name]?.signIn.end(id: id, result: result, now: time.now()) {
            publish(.signInFinished(name))
        }
    }

    /// Waits for the start, then for the device grant's tokens or the redirect's code and its exchange.
    private func completeSignIn(_ name: String, start: Task<LoginStart, Error>) async throws -> LoginOutcome {
        let started = try await withTaskCancellationHandler { try await start.value } onCancel: { start.cancel() }
        let begun: RedirectStart
        switch started {
        case .device(let device): return try await completeDeviceLogin(name, device)
        case .redirect(let redirect): begun = redirect
        }
        let code: Secret
        do {
            code = try await waitForCode(begun)
        } catch {
            await begun.listener.close()
            throw error
        }
        // The one response was taken (any later one is refused), so the listener closes while the code is
        // exchanged instead of before: closing waits for its reply page and its connections to end.
        let listener = begun.listener
        let closing = Task { await listener.close() }
        do {
            let outcome = try await exchange(name, code: code, begun: begun)
            await closing.value
            return outcome
        } catch {
            await closing.value
            throw error
        }
    }

    /// The end of every sign-in (redirect or device): verifies an ID token if there is one, stores the refresh token
    /// in the keyring and caches the rest. The store and the cache take the item's turn (TokenBroker+Redemption.swift):
    /// a refresh under way finishes first, so its rotated token cannot overwrite the new sign-in's. A sign-in that a
    /// reload cancelled (its account's token settings changed, ``reconfigure(_:)``) ends here, before it stores
    /// anything under the new settings' key.
    func signedIn(_ name: String, tokens: TokenSet, metadata: ProviderMetadata,
                  nonce: Secret?, proofKey: DPoPKey?) async throws(AuthError) -> LoginOutcome {
        guard !Task.isCancelled else { throw AuthError(.loginCancelled, "the sign-in was cancelled") }
        let config = try state(name).config
        var tokens = tokens
        var claims: IDTokenClaims?
        if let idToken = tokens.idToken {
            claims = try await verifiedIDToken(idToken, account: name, metadata: metadata, nonce: nonce, original: nil)
            if claims == nil { tokens.idToken = nil }
        }
        let key = SecretKey(config)
        await acquireRedemption(key)
        defer { releaseRedemption(key) }
        let now = time.wallClock()
        let lifetimeBefore = accounts[name]?.lifetime
        // A warning due at once is in the item written below (issue 35), and given only once it is.
        let due = noteSignIn(name, tokens, now: now)
        var stored: StoredIn?
        do throws(AuthError) {
            if let refresh = tokens.refreshToken {
                // The new sign-in's key and ID token claims (OIDC Core §12.2's reference for a refreshed one) go into
                // the same secret as its refresh token: one write.
                let credential = StoredCredential.refreshToken(refresh, proofKey: proofKey, signInClaims: claims)
                stored = try await storeRefreshToken(credential.stored, for: key, as: .signIn)
            } else if tokens.nonExpiring {
                // No refresh token and no expiry (a GitHub OAuth app): the access token is what must survive a restart.
                stored = try await storeRefreshToken(StoredCredential.longLivedAccessToken(tokens.accessToken).stored,
                                                     for: key, as: .signIn)
            } else {
                logger.warning("the server issued no refresh token; the account will need to sign in again when the access token expires",
                               metadata: ["account": "\(name)"])
            }
        } catch {
            // The keyring kept the item it had: the watch goes back to it.
            if let lifetimeBefore { accounts[name]?.lifetime = lifetimeBefore }
            lifetimeBell.ring()
            throw error
        }
        accounts[name]?.idClaims = claims
        accounts[name]?.proofKey = proofKey
        if proofKey != nil {
            accounts[name]?.dpopRefused = false
            logger.info("the sign-in is bound to a DPoP key", metadata: [
                "account": "\(name)", "token_type": "\(tokens.tokenType)"])
        }
        let cached = cacheTokens(name, .default, tokens)
        logger.info("signed in", metadata: ["account": "\(name)"])
        publish(.accountChanged(name))
        announce(name, due, at: now)
        var result = outcome(name, cached.tokens, hasRefreshToken: tokens.refreshToken != nil || tokens.nonExpiring)
        result.subject = claims?.subject
        result.email = claims?.email
        result.name = claims?.name
        switch stored {
        case .memory?, .held?: result.keptInMemory = true
        case .keyring?, nil: break
        }
        return result
    }

    private func outcome(_ name: String, _ tokens: TokenSet, hasRefreshToken: Bool) -> LoginOutcome {
        let remaining = tokens.expiresAt - time.now()
        return LoginOutcome(account: name, scopes: tokens.scopes ?? accounts[name]?.config.scopes,
                            hasRefreshToken: hasRefreshToken,
                            accessTokenExpiresAt: tokens.nonExpiring
                                ? nil : TokenBroker.wallClockInstant(time.wallClock(), plus: remaining))
    }
}
