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
            do throws(AuthError) {
                let metadata = try await metadata(for: name)
                if let endpoint = metadata.revocationEndpoint {
                    var fields = [("token", revoked.reveal()), ("token_type_hint", hint)]
                    let basic = clientAuthentication(config, metadata, into: &fields)
                    let reply = try await http.postForm(endpoint, fields: fields, basicAuth: basic)
                    result.revoked = reply.status == 200
                    if reply.status != 200 { result.revocationError = "the revocation endpoint answered HTTP \(reply.status)" }
                }
            } catch {
                result.revoked = false
                result.revocationError = error.message
            }
        }
        if stored != nil { try await deleteRefreshToken(key) }
        accounts[name]?.refresh.clearFailures()
        logger.info("signed out", metadata: ["account": "\(name)", "revoked": "\(result.revoked.map(String.init) ?? "n/a")"])
        publish(.accountChanged(name))
        return result
    }
}
