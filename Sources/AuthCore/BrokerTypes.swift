import FoundationEssentials

/// An access token handed to a caller.
public struct AccessTokenGrant: Sendable {
    public var account: String
    public var accessToken: Secret
    public var tokenType: String
    /// For a token that does not expire, what the cache counts with (``TokenResponseParser/maximumLifetime`` from
    /// when it was issued or loaded), never to be shown: see ``doesNotExpire``.
    public var expiresIn: Duration
    public var expiresAt: Date
    public var scopes: [String]?
    public var idToken: Secret?
    /// The server gave the token no expiry (``TokenSet/nonExpiring``): callers are told it does not expire.
    public var doesNotExpire = false
    /// A DPoP proof for the request the caller named (``ProofTarget``), with the key this token is bound to; nil for
    /// a Bearer token or when none was asked for.
    public var dpopProof: Secret?
}

/// The request a program wants a DPoP proof for (RFC 9449 §7): what the proof's `htm` and `htu` say, and the
/// resource server's nonce (§9) when it asked for one. `iat` and `jti` are the agent's own.
public struct ProofTarget: Sendable, Equatable {
    public var method: String
    public var url: URL
    public var nonce: String?

    /// Checks what a program sent: a method token (RFC 9110 §5.6.2, at most 32 characters), an absolute http(s) URL
    /// (at most 4 KiB), a nonce of visible ASCII (at most 1 KiB, §8.1's NQCHAR).
    public init(method: String, url: String, nonce: String?) throws(AuthError) {
        let tchar = Set("!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
        guard !method.isEmpty, method.count <= 32, method.allSatisfy({ tchar.contains($0) }) else {
            throw AuthError(.invalidTarget, "the DPoP method must be an HTTP method such as GET or POST")
        }
        guard url.utf8.count <= 4096, let parsed = URL(string: url), let scheme = parsed.scheme?.lowercased(),
              scheme == "https" || scheme == "http", parsed.host?.isEmpty == false else {
            throw AuthError(.invalidTarget, "the DPoP URL must be an absolute http or https URL")
        }
        if let nonce {
            guard !nonce.isEmpty, nonce.utf8.count <= 1024,
                  nonce.unicodeScalars.allSatisfy({ $0 == "!" || ($0.value >= 0x23 && $0.value <= 0x5B) || ($0.value >= 0x5D && $0.value <= 0x7E) }) else {
                throw AuthError(.invalidTarget, "the DPoP nonce must be visible ASCII without quotes or backslashes")
            }
        }
        self.method = method
        self.url = parsed
        self.nonce = nonce
    }
}

/// What a caller needs to follow a pending sign-in: the URL (always shown, even when a browser opened) and
/// whether the browser could be started.
public struct LoginTicket: Sendable {
    public var account: String
    public var authorizationURL: URL
    public var redirectURI: String
    public var browserOpened: Bool
    public var browserError: String?
    public var timeout: Duration
    /// Which sign-in this ticket belongs to (a later sign-in of the same account is a different one).
    public var loginID: UUID
    /// Set for a device authorization grant sign-in (RFC 8628): what the person must open and type. Then
    /// `authorizationURL` is the verification URI and `redirectURI` is empty.
    public var device: DeviceVerification?
}

/// What a person needs to approve a device sign-in (never the device code itself).
public struct DeviceVerification: Sendable, Equatable {
    public var userCode: String
    public var verificationURI: URL
    public var verificationURIComplete: URL?
    public var expiresIn: Int
    public var interval: Int

    public init(userCode: String, verificationURI: URL, verificationURIComplete: URL?, expiresIn: Int, interval: Int) {
        self.userCode = userCode
        self.verificationURI = verificationURI
        self.verificationURIComplete = verificationURIComplete
        self.expiresIn = expiresIn
        self.interval = interval
    }
}

/// How a sign-in reaches the person.
public enum LoginMethod: String, Sendable, CaseIterable {
    /// The browser and a redirect (loopback or pasted). If the browser cannot be started and the server offers the
    /// device grant, the device grant is used instead.
    case redirect
    /// The device authorization grant (RFC 8628) only; `device_grant_unsupported` if the server does not offer it.
    case device
    /// The device grant when the server offers it, else ``redirect`` (for headless and SSH sessions).
    case preferDevice = "prefer_device"
}

public struct LoginOutcome: Sendable {
    public var account: String
    public var subject: String?
    public var email: String?
    public var name: String?
    public var scopes: [String]?
    public var hasRefreshToken: Bool
    /// Nil when the access token does not expire (``TokenSet/nonExpiring``).
    public var accessTokenExpiresAt: Date?
    /// The sign-in lives in the agent's memory only (no Secret Service; ``StoreChoice``): it ends with the agent.
    public var keptInMemory = false
}

public struct LogoutOutcome: Sendable {
    public var account: String
    /// A refresh token was found (and deleted).
    public var hadRefreshToken: Bool
    /// nil when nothing was sent (no token or no revocation endpoint).
    public var revoked: Bool?
    public var revocationError: String?
}

public struct RecordedError: Sendable, Equatable {
    public var code: AuthError.Code
    public var message: String
    public var at: Date
}

public struct AccountStatus: Sendable {
    public var name: String
    public var issuer: String
    public var clientID: String
    public var registeredRedirectURI: String
    public var scopes: [String]
    /// nil when the keyring could not be asked (locked or absent).
    public var hasRefreshToken: Bool?
    /// Both nil when no token is cached or the cached one does not expire (``accessTokenDoesNotExpire``).
    public var accessTokenExpiresAt: Date?
    public var accessTokenExpiresIn: Duration?
    /// The cached access token has no expiry (``TokenSet/nonExpiring``).
    public var accessTokenDoesNotExpire = false
    public var lastRefresh: Date?
    public var lastError: RecordedError?
    public var loginPending: Bool
    /// The account's `git_hosts` (for `authctl git-credential` without `--account`).
    public var gitHosts: [String] = []
    /// Access tokens cached for a scope subset and/or resource (`scoped_tokens = true`), in a stable order.
    public var scopedTokens: [ScopedTokenStatus] = []
    /// When the sign-in ends, if known (TokenBroker+Lifetime.swift); it may have passed.
    public var signInValidUntil: Date?
    /// ``signInValidUntil`` has passed (``SignInExpiryWatch/hasEnded(at:)``): the account needs a new sign-in.
    public var signInEnded = false
    /// The sign-in lives in the agent's memory only (``StoreChoice``), and why the last move to a Secret Service
    /// that appeared failed, if one was tried.
    public var keptInMemory = false
    public var keyringMoveError: String?
    /// What DPoP binds, when this run knows (RFC 9449): `access_token` (the access token, and the refresh token of
    /// a public client), `refresh_token` (only the refresh token: the server answered `Bearer` to a proof), or
    /// `refused` (dpop = "auto" and the server refused the proof, so the sign-in went on without it).
    public var dpop: String?
    /// Where the sign-in's DPoP key is, when this run has it: `tpm` (held by the TPM) or `software` (in the keyring
    /// item); what `dpop_key = "auto"` chose.
    public var dpopKey: String?
}

/// One scoped access token in `status`: what it is for and when it expires (never the token).
public struct ScopedTokenStatus: Sendable, Equatable {
    /// nil: the account's granted scopes.
    public var scopes: [String]?
    public var resource: String?
    /// Not to be shown when ``doesNotExpire``: the cache's own horizon, not the token's.
    public var expiresAt: Date
    public var expiresIn: Duration
    /// The token has no expiry (``TokenSet/nonExpiring``).
    public var doesNotExpire = false
}

public struct BrokerStatus: Sendable {
    public var keyring: KeyringState
    /// `[agent] store`.
    public var store: StoreChoice
    /// Who answers as the Secret Service (nil: none, or unknown).
    public var keyringService: KeyringService?
    public var accounts: [AccountStatus]
}
