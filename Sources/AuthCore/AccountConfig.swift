import FoundationEssentials

/// One configured account, resolved and validated once at start-up and passed around by value.
public struct AccountConfig: Sendable, Equatable {
    public enum ClientAuthMethod: String, Sendable, Equatable {
        case none, clientSecretBasic = "client_secret_basic", clientSecretPost = "client_secret_post"
    }

    public var name: String
    public var issuer: URL
    public var clientID: String
    public var clientSecret: Secret?
    public var scopes: [String]
    public var authorizationEndpoint: URL?
    public var tokenEndpoint: URL?
    public var revocationEndpoint: URL?
    /// Where the provider publishes its ID token signing keys, when discovery does not say.
    public var jwksURI: URL?
    /// RFC 8628 device authorization endpoint, for servers whose metadata does not list it.
    public var deviceAuthorizationEndpoint: URL?
    /// The loopback literal tried first for the redirect listener; the other one is the fallback.
    public var redirectHost: LoopbackHost
    /// 0 means an ephemeral port chosen per sign-in.
    public var redirectPort: UInt16
    public var redirectPath: String
    /// A private-use URI scheme redirect instead of the loopback listener (RFC 8252 §7.1).
    public var privateUseRedirect: PrivateUseRedirect?
    public var extraAuthParams: [String: String]
    public var clientAuthMethod: ClientAuthMethod?
    public var loginTimeout: Duration
    /// `HOST[:PORT][/PATH-PREFIX]` entries for which `authctl git-credential` (without `--account`) uses this account.
    public var gitHosts: [String] = []
    /// `scoped_tokens`: callers may ask for a subset of `scopes` and/or a resource (TokenCacheKey). Off by default:
    /// safe only with servers that keep a refresh token's scope when they rotate it (RFC 6749 §6).
    public var scopedTokens = false
    /// `allowed_clients` and `confirm`: which local programs may get this account's tokens. Open by default.
    public var access: AccessPolicy = .open
    /// `sign_in_lifetime` and `sign_in_lifetime_kind`: how long the provider keeps a sign-in, when it does not say
    /// (`refresh_token_expires_in`, which wins). nil: unknown.
    public var signInLifetime: SignInLifetime?
    /// `sign_in_warning`: how long before the sign-in ends the user is told.
    public var signInWarning: Duration = SignInLifetime.defaultWarning
    /// `dpop`: sender-constrained tokens (RFC 9449).
    public var dpop: Choice = .auto
    /// `par`: pushed authorization requests (RFC 9126).
    public var par: Choice = .auto
    /// `dpop_key`: where a sign-in's DPoP key is made and kept.
    public var dpopKey: KeyPlace = .software

    /// Where a sign-in's DPoP key lives (`dpop_key`).
    public enum KeyPlace: String, Sendable, Equatable, CaseIterable {
        /// In the agent, kept in the keyring item with the refresh token (the default).
        case software
        /// In the TPM (`[agent] tpm_tcti`): the item keeps only a blob that TPM alone can load. No TPM at sign-in
        /// refuses the sign-in; never a software key instead.
        case tpm
        /// The TPM when one answers at sign-in, a software key otherwise (`authctl status` says which).
        case auto
    }

    /// How an account takes a protocol feature the server may offer (`dpop`, `par`).
    public enum Choice: String, Sendable, Equatable {
        /// Used when the server's metadata offers (or requires) it.
        case auto
        /// Required: a server that does not offer it is an error.
        case required
        case off
    }

    public init(
        name: String, issuer: URL, clientID: String, clientSecret: Secret? = nil, scopes: [String] = [],
        authorizationEndpoint: URL? = nil, tokenEndpoint: URL? = nil, revocationEndpoint: URL? = nil,
        jwksURI: URL? = nil, redirectHost: LoopbackHost = .ipv4, redirectPort: UInt16 = 0, redirectPath: String? = nil, extraAuthParams: [String: String] = [:],
        clientAuthMethod: ClientAuthMethod? = nil, loginTimeout: Duration = .seconds(300),
        deviceAuthorizationEndpoint: URL? = nil, privateUseRedirect: PrivateUseRedirect? = nil
    ) {
        self.name = name
        self.issuer = issuer
        self.clientID = clientID
        self.clientSecret = clientSecret
        self.scopes = scopes
        self.authorizationEndpoint = authorizationEndpoint
        self.tokenEndpoint = tokenEndpoint
        self.revocationEndpoint = revocationEndpoint
        self.jwksURI = jwksURI
        self.deviceAuthorizationEndpoint = deviceAuthorizationEndpoint
        self.privateUseRedirect = privateUseRedirect
        self.redirectHost = redirectHost
        self.redirectPort = redirectPort
        self.redirectPath = redirectPath ?? AccountConfig.defaultRedirectPath(for: name)
        self.extraAuthParams = extraAuthParams
        self.clientAuthMethod = clientAuthMethod
        self.loginTimeout = loginTimeout
    }

    /// Unique per account (RFC 8252 §8.10): a response for one account can never complete another's sign-in.
    public static func defaultRedirectPath(for name: String) -> String { "/oauth2/callback/\(name)" }

    /// The redirect URI to register at the provider. With an ephemeral port, providers that follow RFC 8252 §7.3
    /// accept any port on the loopback literal, so the port-less form is what gets registered. Register the
    /// fallback literal's form too if the machine may lack this family's loopback.
    public var registeredRedirectURI: String {
        if let privateUseRedirect { return privateUseRedirect.uri }
        let host = redirectHost.uriLiteral
        return redirectPort == 0 ? "http://\(host)\(redirectPath)" : "http://\(host):\(redirectPort)\(redirectPath)"
    }

    public var wantsOpenID: Bool { scopes.contains("openid") }

    /// Authorization request parameters that `extra_auth_params` may not override: those the agent sets, and those
    /// that change how the response comes back (`response_mode`: fragment or form_post never reach the loopback
    /// listener's query) or move the request elsewhere (`request`, `request_uri`: JAR and PAR, which the agent does
    /// itself).
    public static let reservedAuthParams: Set<String> = [
        "response_type", "client_id", "redirect_uri", "scope", "state", "nonce",
        "code_challenge", "code_challenge_method", "dpop_jkt", "request_uri", "request", "response_mode",
    ]
    /// Account names appear in paths and keyring attributes: keep them boring.
    public static func isValidName(_ name: String) -> Bool {
        !name.isEmpty && name.count <= 64 && name.unicodeScalars.allSatisfy {
            ("a"..."z").contains($0) || ("A"..."Z").contains($0) || ("0"..."9").contains($0) || $0 == "-" || $0 == "_" || $0 == "."
        } && !name.hasPrefix("-") && !name.hasPrefix(".")
    }
}
