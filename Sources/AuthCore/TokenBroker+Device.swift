import FoundationEssentials
import Logging

/// The device authorization grant (RFC 8628) and the choice between it and the browser redirect.
extension TokenBroker {
    /// A device sign-in between the device authorization response and the tokens.
    struct DeviceStart: Sendable {
        let ticket: LoginTicket
        let authorization: DeviceAuthorization
        let metadata: ProviderMetadata
        let startedAt: ContinuousClock.Instant
        /// The sign-in's DPoP key: every poll carries a proof with it (RFC 9449 §5).
        let proofKey: DPoPKey?
    }

    static let deviceGrantType = "urn:ietf:params:oauth:grant-type:device_code"

    /// Starts the sign-in the method asks for (``SignInRoute``): the redirect flow falls back to the device grant when
    /// the browser could not be started and the server offers the grant.
    func startSignIn(_ config: AccountConfig, id: UUID, openBrowser: Bool, method: LoginMethod) async throws -> LoginStart {
        let metadata = try await metadata(for: config.name)
        switch SignInRoute.choose(method, offersDevice: metadata.deviceAuthorizationEndpoint != nil, openBrowser: openBrowser) {
        case .deviceUnsupported:
            throw AuthError(.deviceGrantUnsupported,
                "the authorization server of '\(config.name)' does not offer the device authorization grant (no device_authorization_endpoint)")
        case .device:
            return .device(try await startDeviceLogin(config, metadata: metadata, id: id))
        case .redirect(let deviceFallback):
            let redirect = try await startLogin(config, metadata: metadata, id: id, openBrowser: openBrowser)
            guard deviceFallback, !redirect.ticket.browserOpened else { return .redirect(redirect) }
            await redirect.listener.close()
            logger.notice("no browser could be started; signing in with a device code instead",
                          metadata: ["account": "\(config.name)"])
            return .device(try await startDeviceLogin(config, metadata: metadata, id: id))
        }
    }

    /// RFC 8628 §3.1-3.2: asks the device authorization endpoint for a device code and a user code.
    func startDeviceLogin(_ config: AccountConfig, metadata: ProviderMetadata, id: UUID) async throws(AuthError) -> DeviceStart {
        guard let endpoint = metadata.deviceAuthorizationEndpoint else {
            throw AuthError(.deviceGrantUnsupported, "the authorization server offers no device authorization endpoint")
        }
        let proofKey = try await proofKeyForSignIn(config, metadata)
        var fields: [(String, String)] = []
        if !config.scopes.isEmpty { fields.append(("scope", config.scopes.joined(separator: " "))) }
        let basic = clientAuthentication(config, metadata, into: &fields)
        let startedAt = time.now()
        let reply = try await http.postForm(endpoint, fields: fields, basicAuth: basic)
        let authorization = try DeviceAuthorization.parse(reply)
        let interval = authorization.interval ?? Int(DevicePolling.defaultInterval.components.seconds)
        let ticket = LoginTicket(
            account: config.name, authorizationURL: authorization.verificationURIComplete ?? authorization.verificationURI,
            redirectURI: "", browserOpened: false, timeout: .seconds(authorization.expiresIn), loginID: id,
            device: DeviceVerification(userCode: authorization.userCode, verificationURI: authorization.verificationURI,
                                       verificationURIComplete: authorization.verificationURIComplete,
                                       expiresIn: authorization.expiresIn, interval: interval))
        logger.info("device sign-in started", metadata: [
            "account": "\(config.name)", "verification_uri": "\(authorization.verificationURI.absoluteString)",
            "expires_in_s": "\(authorization.expiresIn)", "interval_s": "\(interval)"])
        return DeviceStart(ticket: ticket, authorization: authorization, metadata: metadata, startedAt: startedAt,
                           proofKey: proofKey)
    }

    /// RFC 8628 §3.4-3.5: polls the token endpoint (the rules live in ``DevicePolling``) and ends the sign-in like
    /// the redirect flow does (``signedIn(_:tokens:metadata:nonce:)``: keyring, cache, ID token). There is no nonce in
    /// this grant, and an ID token is not required: servers (Django OAuth Toolkit among them) issue none here.
    func completeDeviceLogin(_ name: String, _ device: DeviceStart) async throws(AuthError) -> LoginOutcome {
        let config = try state(name).config
        let metadata = device.metadata
        var fields = [("grant_type", TokenBroker.deviceGrantType), ("device_code", device.authorization.deviceCode.reveal())]
        let basic = clientAuthentication(config, metadata, into: &fields)
        let machine = DevicePolling(interval: device.authorization.interval, expiresIn: device.authorization.expiresIn,
                                    startedAt: device.startedAt)
        let time = self.time
        let proofKey = device.proofKey
        let tokens: TokenSet
        do {
            tokens = try await DevicePolling.run(
                machine, now: { time.now() }, sleep: { try await time.sleep(for: $0) },
                request: { () async throws(AuthError) -> DevicePolling.Attempt<TokenSet> in
                    let sentAt = time.now()
                    let reply = try await self.postToTokenEndpoint(metadata, fields: fields, basicAuth: basic,
                                                                   proofKey: proofKey)
                    guard (200..<300).contains(reply.status) else { return .notYet(reply) }
                    return .tokens(try TokenResponseParser.parse(reply, receivedAt: sentAt, proofSent: proofKey != nil))
                })
        } catch {
            throw TokenBroker.authError(error)
        }
        return try await signedIn(name, tokens: tokens, metadata: metadata, nonce: nil, proofKey: proofKey)
    }
}
