import AgentIPC

/// Which token `authctl kube-credential` hands to kubectl, and whether the agent's answer will do.
public enum KubeCredential {
    public enum Kind: Sendable, Equatable {
        /// The OIDC ID token: what a cluster configured with `--oidc-issuer-url` (or a structured JWT
        /// authenticator) verifies. Its audience is our client ID and it carries the user's claims.
        case idToken
        /// The OAuth access token: for clusters whose webhook or proxy accepts the provider's access tokens.
        case accessToken
    }

    public enum Outcome: Sendable, Equatable {
        case credential(ExecCredential)
        /// The account has no ID token (no `openid` scope, or a plain OAuth server).
        case noIDToken
        /// The ID token is expired, or will be within `minValid` seconds, at this Unix time.
        case idTokenStale(expiresAt: Int)
    }

    /// Decides from one `token` answer (asked with `id_token` for ``Kind/idToken``).
    public static func decide(kind: Kind, token: TokenResult, now: Int, minValid: Int) -> Outcome {
        decide(kind: kind, accessToken: token.accessToken, accessTokenExpiresAt: token.expiresAt, idToken: token.idToken,
               now: now, minValid: minValid)
    }

    /// Decides from one `token` answer. The ID token's own `exp` is its expiry, which can differ from the access
    /// token's (the agent keeps the last ID token when a refresh returns none), so it is checked here: handing
    /// kubectl an expired ID token would make every request fail until the cached credential lapses.
    /// `accessTokenExpiresAt` is nil for an access token that does not expire.
    public static func decide(kind: Kind, accessToken: String, accessTokenExpiresAt: Int?, idToken: String?,
                              now: Int, minValid: Int) -> Outcome {
        switch kind {
        case .accessToken:
            return .credential(ExecCredential(token: accessToken, expiresAt: accessTokenExpiresAt))
        case .idToken:
            guard let idToken, !idToken.isEmpty else { return .noIDToken }
            // Every ID token carries `exp` (OIDC Core §2); if it cannot be read, the access token's expiry is the
            // best bound we have.
            let expiresAt = JWTClaims.expiry(of: idToken) ?? accessTokenExpiresAt
            if let expiresAt, expiresAt <= now + minValid { return .idTokenStale(expiresAt: expiresAt) }
            return .credential(ExecCredential(token: idToken, expiresAt: expiresAt))
        }
    }
}
