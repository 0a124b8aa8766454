import Foundation

/// An access token handed to a caller.
public struct AccessTokenGrant: Sendable {
    public var account: String
    public var accessToken: Secret
    public var tokenType: String
    public var expiresIn: Duration
    public var expiresAt: Date
    public var scopes: [String]?
    public var idToken: Secret?
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
}

public struct LoginOutcome: Sendable {
    public var account: String
    public var subject: String?
    public var email: String?
    public var name: String?
    public var scopes: [String]?
    public var hasRefreshToken: Bool
    public var accessTokenExpiresAt: Date
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
    public var accessTokenExpiresAt: Date?
    public var accessTokenExpiresIn: Duration?
    public var lastRefresh: Date?
    public var lastError: RecordedError?
    public var loginPending: Bool
    /// The account's `git_hosts` (for `authctl git-credential` without `--account`).
    public var gitHosts: [String] = []
}

public struct BrokerStatus: Sendable {
    public var keyring: KeyringState
    public var accounts: [AccountStatus]
}
