import FoundationEssentials

/// The parts of RFC 8414 / OIDC discovery metadata the agent uses, after validation.
public struct ProviderMetadata: Sendable, Equatable {
    public var issuer: URL
    public var authorizationEndpoint: URL
    public var tokenEndpoint: URL
    public var revocationEndpoint: URL?
    public var jwksURI: URL?
    /// RFC 8628: present when the server offers the device authorization grant.
    public var deviceAuthorizationEndpoint: URL?
    public var codeChallengeMethods: [String]
    public var tokenEndpointAuthMethods: [String]
    /// RFC 9207: when true, the authorization response must carry `iss` equal to ``issuer``.
    public var requiresIssInResponse: Bool
    /// RFC 9449 §5.1: `dpop_signing_alg_values_supported`; empty when the server does not say it offers DPoP.
    public var dpopSigningAlgorithms: [String] = []
    /// RFC 9126 §5: `pushed_authorization_request_endpoint`, and whether the server takes only pushed requests.
    public var pushedAuthorizationEndpoint: URL?
    public var requiresPushedAuthorization = false

    /// The algorithm a new sign-in's DPoP key uses: ES256 when the server offers it, else EdDSA when offered; nil
    /// when the server offers DPoP with neither (or not at all).
    public var dpopAlgorithm: DPoPKey.Algorithm? { DPoPKey.Algorithm.preferred(offered: dpopSigningAlgorithms) }

    public init(
        issuer: URL, authorizationEndpoint: URL, tokenEndpoint: URL, revocationEndpoint: URL? = nil,
        jwksURI: URL? = nil, codeChallengeMethods: [String] = ["S256"], tokenEndpointAuthMethods: [String] = [],
        requiresIssInResponse: Bool = false, deviceAuthorizationEndpoint: URL? = nil, dpopSigningAlgorithms: [String] = [],
        pushedAuthorizationEndpoint: URL? = nil, requiresPushedAuthorization: Bool = false
    ) {
        self.pushedAuthorizationEndpoint = pushedAuthorizationEndpoint
        self.requiresPushedAuthorization = requiresPushedAuthorization
        self.dpopSigningAlgorithms = dpopSigningAlgorithms
        self.issuer = issuer
        self.authorizationEndpoint = authorizationEndpoint
        self.tokenEndpoint = tokenEndpoint
        self.revocationEndpoint = revocationEndpoint
        self.jwksURI = jwksURI
        self.codeChallengeMethods = codeChallengeMethods
        self.tokenEndpointAuthMethods = tokenEndpointAuthMethods
        self.requiresIssInResponse = requiresIssInResponse
        self.deviceAuthorizationEndpoint = deviceAuthorizationEndpoint
    }

    /// The discovery URLs to try, in order: OIDC (`issuer + /.well-known/openid-configuration`), then RFC 8414
    /// (`/.well-known/oauth-authorization-server` inserted before the issuer's path).
    public static func discoveryURLs(for issuer: URL) -> [URL] {
        var text = issuer.absoluteString
        while text.hasSuffix("/") { text.removeLast() }
        var urls: [URL] = []
        if let oidc = URL(string: text + "/.well-known/openid-configuration") { urls.append(oidc) }
        if var components = URLComponents(url: issuer, resolvingAgainstBaseURL: false) {
            let path = components.path == "/" ? "" : components.path
            components.path = "/.well-known/oauth-authorization-server" + path
            if let rfc8414 = components.url { urls.append(rfc8414) }
        }
        return urls
    }

    /// Parses and checks a discovery document: `issuer` must equal the configured one exactly, endpoints must pass
    /// ``EndpointPolicy``, and S256 must be advertised when the server lists its PKCE methods.
    public static func parse(_ body: [UInt8], expectedIssuer: URL) throws(AuthError) -> ProviderMetadata {
        let document: [String: JSONValue]?
        do { document = try JSONValue.object(body) } catch { throw error.authError(.invalidMetadata, "the discovery document") }
        guard let object = document else {
            throw AuthError(.invalidMetadata, "the discovery document from \(expectedIssuer.absoluteString) is not a JSON object")
        }
        guard let issuer = object["issuer"]?.string else {
            throw AuthError(.invalidMetadata, "the discovery document has no 'issuer'")
        }
        guard sameIssuer(issuer, expectedIssuer.absoluteString) else {
            throw AuthError(.issuerMismatch,
                "the discovery document names issuer '\(issuer)', not the configured '\(expectedIssuer.absoluteString)'")
        }
        func endpoint(_ key: String, required: Bool) throws(AuthError) -> URL? {
            guard let value = object[key]?.string else {
                if required { throw AuthError(.invalidMetadata, "the discovery document has no '\(key)'") }
                return nil
            }
            switch EndpointPolicy.validate(value) {
            case .success(let url): return url
            case .failure(let rejection):
                throw AuthError(.insecureEndpoint, "the discovery document's '\(key)' \(rejection.reason)")
            }
        }
        let methods = object["code_challenge_methods_supported"]?.strings
        if let methods, !methods.contains("S256") {
            throw AuthError(.pkceUnsupported, "the server does not support PKCE with S256 (it lists \(methods))")
        }
        return ProviderMetadata(
            issuer: expectedIssuer,
            authorizationEndpoint: try endpoint("authorization_endpoint", required: true)!,
            tokenEndpoint: try endpoint("token_endpoint", required: true)!,
            revocationEndpoint: try endpoint("revocation_endpoint", required: false),
            jwksURI: try endpoint("jwks_uri", required: false),
            codeChallengeMethods: methods ?? [],
            tokenEndpointAuthMethods: object["token_endpoint_auth_methods_supported"]?.strings ?? [],
            requiresIssInResponse: object["authorization_response_iss_parameter_supported"]?.bool ?? false,
            deviceAuthorizationEndpoint: try endpoint("device_authorization_endpoint", required: false),
            dpopSigningAlgorithms: object["dpop_signing_alg_values_supported"]?.strings ?? [],
            pushedAuthorizationEndpoint: try endpoint("pushed_authorization_request_endpoint", required: false),
            requiresPushedAuthorization: object["require_pushed_authorization_requests"]?.bool ?? false
        )
    }

    /// Applies the account's explicit endpoint overrides on top of discovered (or absent) metadata.
    public static func resolve(_ discovered: ProviderMetadata?, for account: AccountConfig) throws(AuthError) -> ProviderMetadata {
        guard let authorization = account.authorizationEndpoint ?? discovered?.authorizationEndpoint,
              let token = account.tokenEndpoint ?? discovered?.tokenEndpoint
        else {
            throw AuthError(.invalidConfig,
                "account '\(account.name)': no discovery document and no authorization_endpoint/token_endpoint configured")
        }
        var result = discovered ?? ProviderMetadata(issuer: account.issuer, authorizationEndpoint: authorization, tokenEndpoint: token)
        result.authorizationEndpoint = authorization
        result.tokenEndpoint = token
        if let revocation = account.revocationEndpoint { result.revocationEndpoint = revocation }
        if let jwks = account.jwksURI { result.jwksURI = jwks }
        if let device = account.deviceAuthorizationEndpoint { result.deviceAuthorizationEndpoint = device }
        return result
    }

    /// Whether two issuer identifiers name the same authorization server: equal but for trailing slashes (a
    /// configured `https://kc.example/realms/x/` is the server whose metadata says `https://kc.example/realms/x`).
    /// The one comparison of issuers: discovery, the authorization response's `iss` (RFC 9207) and the ID token's.
    public static func sameIssuer(_ a: String, _ b: String) -> Bool {
        func normalize(_ issuer: String) -> Substring {
            var text = Substring(issuer)
            while text.hasSuffix("/") { text.removeLast() }
            return text
        }
        return normalize(a) == normalize(b)
    }
}
