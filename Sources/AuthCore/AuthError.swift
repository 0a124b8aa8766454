/// The one error type of AuthCore. `code` is stable and maps one-to-one onto the socket protocol's error codes;
/// `message` is for people and never contains a secret.
public struct AuthError: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Code: String, Sendable, CaseIterable {
        case unknownAccount = "unknown_account"
        case loginRequired = "login_required"
        case loginTimeout = "login_timeout"
        case loginCancelled = "login_cancelled"
        case accessDenied = "access_denied"
        case loginFailed = "login_failed"
        /// A device sign-in was asked for, but the server offers no device authorization endpoint.
        case deviceGrantUnsupported = "device_grant_unsupported"
        /// Too many sign-ins of the account failed in a row; `retryAfter` says when the next may start.
        case loginRateLimited = "login_rate_limited"
        case keyringLocked = "keyring_locked"
        case keyringUnavailable = "keyring_unavailable"
        case keyringError = "keyring_error"
        case serverUnreachable = "server_unreachable"
        case serverError = "server_error"
        case tlsError = "tls_error"
        case invalidClient = "invalid_client"
        case invalidTokenResponse = "invalid_token_response"
        case invalidMetadata = "invalid_metadata"
        /// The discovery document names another issuer (RFC 8414 §3.3): a mix-up or a wrong `issuer` setting.
        case issuerMismatch = "issuer_mismatch"
        /// The server lists its PKCE methods and S256 is not among them.
        case pkceUnsupported = "pkce_unsupported"
        /// The discovery document lists an endpoint that is not https (or loopback http).
        case insecureEndpoint = "insecure_endpoint"
        case invalidIDToken = "invalid_id_token"
        /// The authorization server refused the agent's DPoP proof (`invalid_dpop_proof`, RFC 9449 §5.2), or the
        /// account requires DPoP (`dpop = true`) and the server does not offer it.
        case dpopRefused = "dpop_refused"
        /// The TPM that holds the account's DPoP key (`dpop_key = "tpm"`) did not answer: none at `tpm_tcti`, no
        /// permission, stopped, or over its deadline. The refresh token is kept.
        case tpmUnavailable = "tpm_unavailable"
        case invalidConfig = "invalid_config"
        case minValidUnsatisfiable = "min_valid_unsatisfiable"
        /// A token was asked for with a scope the account does not configure (or the server refused the scope).
        case invalidScope = "invalid_scope"
        /// A token was asked for with a `resource` that is not an absolute URI without fragment (or the server
        /// refused it, RFC 8707 `invalid_target`).
        case invalidTarget = "invalid_target"
        case internalError = "internal_error"
    }

    public let code: Code
    public let message: String
    /// Seconds the server asked us to wait (`Retry-After`), when it said so.
    public let retryAfter: Int?
    /// For the keyring codes: the program that answers as the Secret Service (``KeyringService/program``), when
    /// known, and what to do, in its words (``KeyringState/advice(store:service:)``).
    public let keyringService: String?
    public let keyringAdvice: String?

    public init(_ code: Code, _ message: String, retryAfter: Int? = nil, keyringService: String? = nil,
                keyringAdvice: String? = nil) {
        self.code = code
        self.message = message
        self.retryAfter = retryAfter
        self.keyringService = keyringService
        self.keyringAdvice = keyringAdvice
    }

    public var description: String { "\(code.rawValue): \(message)" }

    public static func unknownAccount(_ name: String) -> AuthError {
        AuthError(.unknownAccount, "no account named '\(name)' is configured")
    }
    public static func loginRequired(_ account: String) -> AuthError {
        AuthError(.loginRequired, "account '\(account)' needs to sign in: run `authctl login \(account)`")
    }
    /// The store is locked: `message` in the words of the Secret Service that answers (its adapter's).
    public static func keyringLocked(_ service: KeyringService? = nil,
                                     _ message: String = "the keyring is locked: unlock it (e.g. log in to the desktop session) and try again") -> AuthError {
        AuthError(.keyringLocked, message, keyringService: service?.program,
                  keyringAdvice: KeyringState.locked.advice(store: .secretService, service: service))
    }
    public static func keyringUnavailable(_ detail: String) -> AuthError {
        AuthError(.keyringUnavailable, "no Secret Service (GNOME keyring) is reachable on the session bus: \(detail)",
                  keyringAdvice: KeyringState.absent.advice(store: .secretService, service: nil))
    }
    public static func internalError(_ detail: String) -> AuthError { AuthError(.internalError, detail) }
}
