import FoundationEssentials
import Logging

/// Every call to a token endpoint (code exchange, refresh, device polling) goes through here: with the sign-in's
/// DPoP key, each request carries a fresh proof (RFC 9449 §5: `htm` POST, `htu` the endpoint as discovered, a new
/// `jti`, `iat` now by the agent's clock); a `DPoP-Nonce` on any answer (200 included) is kept per server and put in
/// the next proof; a `use_dpop_nonce` answer is retried once with the nonce it carried (§8).
extension TokenBroker {
    func postToTokenEndpoint(_ metadata: ProviderMetadata, fields: [(String, String)],
                             basicAuth: (user: String, password: Secret)?,
                             proofKey: DPoPKey?) async throws(AuthError) -> HTTPReply {
        let endpoint = metadata.tokenEndpoint
        guard let proofKey else { return try await http.postForm(endpoint, fields: fields, basicAuth: basicAuth) }
        let server = TokenBroker.nonceScope(endpoint)
        var retried = false
        while true {
            let proof = try await proofKey.proof(method: "POST", url: endpoint, nonce: dpopNonces[server],
                                                 issuedAt: time.wallClock(), holder: keyHolder)
            let reply = try await http.postForm(endpoint, fields: fields, basicAuth: basicAuth,
                                                headers: [("DPoP", proof.reveal())])
            if let nonce = reply.offeredDPoPNonce { dpopNonces[server] = nonce }
            guard !retried, reply.offeredDPoPNonce != nil, !(200..<300).contains(reply.status),
                  TokenResponseParser.errorCode(reply) == "use_dpop_nonce" else { return reply }
            retried = true
        }
    }

    /// Nonces are the authorization server's (RFC 9449 §8): kept per origin of its token endpoint.
    static func nonceScope(_ endpoint: URL) -> String {
        var parts = URLComponents(url: endpoint, resolvingAgainstBaseURL: false)
        parts?.path = ""
        parts?.query = nil
        parts?.fragment = nil
        return parts?.string ?? endpoint.absoluteString
    }

    /// The key for a new sign-in, by the account's `dpop` setting and the server's metadata: a new key when DPoP is
    /// on and offered, ES256 whenever the server offers it and EdDSA only when it offers that and not ES256; none
    /// when it is off, or `auto` and not offered; `dpop = true` without the server offering either is an error.
    /// Where the key is made is `dpop_key`'s (``newKey(_:_:)``).
    func proofKeyForSignIn(_ config: AccountConfig, _ metadata: ProviderMetadata) async throws(AuthError) -> DPoPKey? {
        switch config.dpop {
        case .off: return nil
        // A server that refused DPoP for this client (``exchange(_:code:begun:)``) is not asked again until the
        // agent restarts: its code may have been bound by `dpop_jkt`, and only a request without it then works.
        case .auto:
            guard accounts[config.name]?.dpopRefused != true, let algorithm = metadata.dpopAlgorithm else { return nil }
            return try await newKey(algorithm, config)
        case .required:
            guard let algorithm = metadata.dpopAlgorithm else {
                let offered = metadata.dpopSigningAlgorithms.isEmpty
                    ? "its metadata has no dpop_signing_alg_values_supported"
                    : "it offers \(metadata.dpopSigningAlgorithms.joined(separator: ", ")), not ES256 or EdDSA"
                throw AuthError(.dpopRefused,
                                "account '\(config.name)' has dpop = true, but the authorization server does not offer DPoP (\(offered))")
            }
            return try await newKey(algorithm, config)
        }
    }

    /// A new key for `algorithm`, where the account's `dpop_key` says: in the agent (`software`); in the TPM (`tpm`:
    /// ES256 only, and no TPM is an error, never a software key instead); or in the TPM when one answers, else in the
    /// agent (`auto`, said in the journal and in `status`).
    func newKey(_ algorithm: DPoPKey.Algorithm, _ config: AccountConfig) async throws(AuthError) -> DPoPKey {
        switch config.dpopKey {
        case .software:
            return DPoPKey(algorithm)
        case .tpm:
            guard algorithm == .es256 else {
                throw AuthError(.dpopRefused, "account '\(config.name)' has dpop_key = \"tpm\", which signs ES256 only, and the authorization server offers DPoP with EdDSA only")
            }
            guard let keyHolder else {
                throw AuthError(.tpmUnavailable, "account '\(config.name)' has dpop_key = \"tpm\", and the agent has no TPM configured")
            }
            do throws(AuthError) {
                return DPoPKey(held: try await keyHolder.createKey())
            } catch {
                throw AuthError(error.code == .loginRequired ? .tpmUnavailable : error.code,
                                "account '\(config.name)' has dpop_key = \"tpm\", and the TPM cannot make its key, so the sign-in is refused: \(error.message)")
            }
        case .auto:
            guard algorithm == .es256, let keyHolder else { return DPoPKey(algorithm) }
            do throws(AuthError) {
                return DPoPKey(held: try await keyHolder.createKey())
            } catch {
                logger.notice("no TPM answered; this sign-in's DPoP key is kept in the keyring (dpop_key = \"auto\")",
                              metadata: ["account": "\(config.name)", "error_code": "\(error.code.rawValue)",
                                         "error": "\(error.message)"])
                return DPoPKey(algorithm)
            }
        }
    }
}
