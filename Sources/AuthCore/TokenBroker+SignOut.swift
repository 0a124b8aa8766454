import Logging

/// Sign-out: the refresh token revoked at the server when it can be, and forgotten here in any case.
extension TokenBroker {
    /// Revokes the refresh token (RFC 7009) when the server has an endpoint, then always deletes it locally and
    /// drops cached access tokens. Revocation failure is reported, not fatal.
    ///
    /// A refresh under way is let finish first (the item's turn, TokenBroker+Redemption.swift): the server may be
    /// rotating the refresh token, and the token revoked and deleted is then the one it issued, not one it has already
    /// replaced, whose successor would otherwise be stored, and its access token cached, after the sign-out.
    public func logout(account name: String) async throws(AuthError) -> LogoutOutcome {
        let config = try state(name).config
        accounts[name]?.signIn.pending?.flow.completion.cancel()
        let key = SecretKey(config)
        await acquireRedemption(key)
        defer { releaseRedemption(key) }
        accounts[name]?.cache = nil
        accounts[name]?.scoped = [:]
        accounts[name]?.idClaims = nil
        accounts[name]?.proofKey = nil
        accounts[name]?.dpopRefused = false
        let stored = try await loadRefreshToken(key)
        var result = LogoutOutcome(account: name, hadRefreshToken: stored != nil)
        // An item whose key cannot be read is deleted without a revocation (its token's text is not known apart).
        if let stored, let credential = try? StoredCredential(stored: stored) {
            let (revoked, hint) = switch credential.token {
            case .refreshToken(let refresh): (refresh, "refresh_token")
            case .longLivedAccessToken(let access): (access, "access_token")
            }
            (result.revoked, result.revocationError) = await revoke(revoked, hint: hint, account: name)
        }
        if stored != nil { try await deleteRefreshToken(key) }
        accounts[name]?.refresh.clearFailures()
        logger.info("signed out", metadata: ["account": "\(name)", "revoked": "\(result.revoked.map(String.init) ?? "n/a")"])
        publish(.accountChanged(name))
        return result
    }

    /// Revokes `token` at account `name`'s server (RFC 7009, `token_type_hint` `hint`): true when it answered 200, false
    /// with why when it did not, nil when the server has no revocation endpoint.
    func revoke(_ token: Secret, hint: String, account name: String) async -> (revoked: Bool?, error: String?) {
        do throws(AuthError) {
            let config = try state(name).config
            let metadata = try await metadata(for: name)
            guard let endpoint = metadata.revocationEndpoint else { return (nil, nil) }
            var fields = [("token", token.reveal()), ("token_type_hint", hint)]
            let basic = clientAuthentication(config, metadata, into: &fields)
            let reply = try await http.postForm(endpoint, fields: fields, basicAuth: basic)
            return reply.status == 200 ? (true, nil) : (false, "the revocation endpoint answered HTTP \(reply.status)")
        } catch {
            return (false, error.message)
        }
    }
}
