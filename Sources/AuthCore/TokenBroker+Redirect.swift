import FoundationEssentials
import Logging

/// The redirect sign-in (loopback listener, manual paste, private-use scheme): opening the way back, judging what
/// arrives, and exchanging the code. Every response, whichever way it came, goes through one single-use wait.
extension TokenBroker {
    struct RedirectStart: Sendable {
        let ticket: LoginTicket
        let listener: any RedirectListener
        let session: LoginSession
        let metadata: ProviderMetadata
        /// Every response, from the listener or pasted, goes through it; exactly one completes the sign-in.
        let responses: RedirectResponses
        /// The pushed request (RFC 9126) callers are sent to now, if the request was pushed.
        let pushed: CurrentPush?
    }

    /// Makes the session, then opens the way back judging against it (the loopback listener, or for a private-use
    /// scheme none: the response arrives through `login_callback`), builds the request for the redirect URI that
    /// way has and starts the browser.
    func startLogin(_ config: AccountConfig, metadata: ProviderMetadata, id: UUID,
                    openBrowser: Bool) async throws -> RedirectStart {
        let session = LoginSession(account: config, metadata: metadata, proofKey: try await proofKeyForSignIn(config, metadata))
        let responses = RedirectResponses(session: session)
        let listener: any RedirectListener
        if let privateUse = config.privateUseRedirect {
            listener = PrivateUseReceiver(redirectURI: privateUse.uri)
        } else {
            listener = try await redirects.listen(host: config.redirectHost, port: config.redirectPort,
                                                  path: config.redirectPath, judge: responses.page(query:))
        }
        let authorizationURL: URL
        let pushed: PushedRequest?
        do {
            (authorizationURL, pushed) = try await self.authorizationURL(for: session, redirectURI: listener.redirectURI,
                                                                         config, metadata)
        } catch {
            await listener.close()
            throw error
        }
        // The ID token will need the provider's keys: fetch them while the person signs in, not after.
        if config.wantsOpenID, let jwks = metadata.jwksURI { providers.prefetchSigningKeys(account: config.name, from: jwks) }
        var ticket = LoginTicket(account: config.name, authorizationURL: authorizationURL,
                                 redirectURI: listener.redirectURI, browserOpened: false, timeout: config.loginTimeout,
                                 loginID: id)
        if openBrowser {
            do {
                try await browser.open(authorizationURL)
                ticket.browserOpened = true
            } catch {
                ticket.browserError = error.message
                logger.warning("could not start a browser; the URL is shown to the user instead",
                               metadata: ["account": "\(config.name)", "error": "\(error.message)"])
            }
        } else {
            ticket.browserError = "not started: the client asked for no browser"
        }
        logger.info("sign-in started", metadata: ["account": "\(config.name)", "redirect_uri": "\(listener.redirectURI)",
                                                  "browser": "\(openBrowser)"])
        return RedirectStart(ticket: ticket, listener: listener, session: session, metadata: metadata,
                             responses: responses, pushed: pushed.map { CurrentPush(url: authorizationURL, pushed: $0) })
    }

    /// Manual paste: a final redirect URL that the user copied from a browser (maybe on another machine). It is
    /// judged exactly like a response on the loopback listener (``LoginSession/judge(pastedURL:redirectURI:)``), and the first
    /// genuine response, pasted or received, wins. A rejected URL is an error for this call only: the sign-in keeps
    /// waiting. The URL is never logged (it carries the code).
    public func submitRedirect(account name: String, url: String) async throws(AuthError) {
        _ = try state(name)
        guard let pending = accounts[name]?.signIn.pending?.flow else {
            throw AuthError(.loginFailed, "no sign-in is pending for '\(name)'; start one with `authctl login --no-browser \(name)`")
        }
        let begun: RedirectStart
        do {
            guard case .redirect(let redirect) = try await pending.start.value else {
                throw AuthError(.loginFailed, "the pending sign-in of '\(name)' uses a device code, not a redirect")
            }
            begun = redirect
        } catch { throw TokenBroker.authError(error) }
        let verdict = begun.session.judge(pastedURL: url, redirectURI: begun.listener.redirectURI)
        guard begun.responses.accept(verdict) else {
            throw AuthError(.loginFailed, "this sign-in has already received its response; the pasted URL was not used")
        }
        if case .rejected(let reason) = verdict {
            throw AuthError(.loginFailed, "the pasted URL is not a response to this sign-in (\(reason)); the sign-in is still waiting")
        }
        logger.info("received a pasted redirect", metadata: ["account": "\(name)"])
    }

    /// The first genuine response wins; rejected ones are logged and the wait goes on, up to the timeout.
    func waitForCode(_ begun: RedirectStart) async throws -> Secret {
        let timeout = begun.ticket.timeout
        let logger = self.logger
        let account = begun.ticket.account
        let time = self.time
        return try await withThrowingTaskGroup(of: Secret.self) { group in
            group.addTask {
                for await verdict in begun.responses.verdicts {
                    switch verdict {
                    case .code(let code): return code
                    case .denied(let error, let description):
                        let detail = description.map { ": \($0)" } ?? ""
                        if error == "access_denied" {
                            throw AuthError(.accessDenied, "sign-in was denied at the authorization server (\(error)\(detail))")
                        }
                        throw AuthError(.loginFailed, "the authorization server returned an error (\(error)\(detail))")
                    case .rejected(let reason):
                        logger.warning("ignored a redirect that is not a valid response",
                                       metadata: ["account": "\(account)", "reason": "\(reason)"])
                    }
                }
                throw CancellationError()
            }
            group.addTask {
                try await time.sleep(for: timeout)
                throw AuthError(.loginTimeout, "no sign-in completed within \(timeout.components.seconds) s")
            }
            defer { group.cancelAll() }
            guard let code = try await group.next() else { throw CancellationError() }
            return code
        }
    }

    func exchange(_ name: String, code: Secret, begun: RedirectStart) async throws(AuthError) -> LoginOutcome {
        let config = try state(name).config
        var fields = [
            ("grant_type", "authorization_code"), ("code", code.reveal()),
            ("redirect_uri", begun.listener.redirectURI), ("code_verifier", begun.session.pkce.verifier.reveal()),
        ]
        let basic = clientAuthentication(config, begun.metadata, into: &fields)
        let sentAt = time.now()
        var proofKey = begun.session.proofKey
        var reply = try await postToTokenEndpoint(begun.metadata, fields: fields, basicAuth: basic, proofKey: proofKey)
        // dpop = "auto" never breaks a sign-in that works without DPoP: a server that advertises it but refuses it
        // for this client gets the code exchanged once more without a proof, and that is said.
        if proofKey != nil, config.dpop == .auto, !(200..<300).contains(reply.status),
           TokenResponseParser.errorCode(reply) == "invalid_dpop_proof" {
            logger.notice("the authorization server refused DPoP for this client; signing in without it (set dpop = false to skip it)",
                          metadata: ["account": "\(name)"])
            proofKey = nil
            accounts[name]?.dpopRefused = true
            reply = try await postToTokenEndpoint(begun.metadata, fields: fields, basicAuth: basic, proofKey: nil)
        }
        let tokens: TokenSet
        do throws(AuthError) {
            tokens = try TokenResponseParser.parse(reply, receivedAt: sentAt, proofSent: proofKey != nil)
        } catch let error where error.code == .loginRequired {
            // Refused again after this exchange fell back from the refused proof: the code was bound to the key by
            // dpop_jkt. The next sign-in asks without it (``proofKeyForSignIn``).
            let next = begun.session.proofKey != nil && proofKey == nil
                ? "; the server refused DPoP for this client, so sign in again: the next sign-in goes without it" : ""
            throw AuthError(.loginFailed, "the authorization server did not accept the authorization code (\(error.message))\(next)")
        }
        if config.wantsOpenID, tokens.idToken == nil {
            throw AuthError(.invalidIDToken, "the server returned no ID token although 'openid' was requested")
        }
        return try await signedIn(name, tokens: tokens, metadata: begun.metadata, nonce: begun.session.nonce,
                                  proofKey: proofKey)
    }
}
