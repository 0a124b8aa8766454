import AgentIPC

/// authctl's answer to git's `get`: `username`, `password` (the access token) and `password_expiry_utc`, then a
/// blank line. git 2.41 and later use the expiry to drop the credential before it lapses; older gits ignore it.
public struct GitCredentialReply: Sendable, Equatable {
    public var username: String
    public var password: String
    /// Unix seconds.
    public var passwordExpiryUTC: Int?

    public init(username: String, password: String, passwordExpiryUTC: Int?) {
        self.username = username
        self.password = password
        self.passwordExpiryUTC = passwordExpiryUTC
    }

    /// The agent's access token for git: no `password_expiry_utc` for a token that does not expire, so git keeps
    /// using it instead of dropping it at a made-up time.
    public init(username: String, token: TokenResult) {
        self.init(username: username, password: token.accessToken, passwordExpiryUTC: token.expiresAt)
    }

    /// The lines to write to stdout. Values with a newline or NUL would break (or inject into) git's line format,
    /// so they are refused; the error never carries the value, which may be a token.
    public func encoded() throws(GitCredentialReplyError) -> String {
        guard Self.isSafeValue(username) else { throw .unsafeValue("username") }
        guard !password.isEmpty, Self.isSafeValue(password) else { throw .unsafeValue("password") }
        var text = "username=\(username)\npassword=\(password)\n"
        if let passwordExpiryUTC { text += "password_expiry_utc=\(passwordExpiryUTC)\n" }
        return text + "\n"
    }

    public static func isSafeValue(_ value: String) -> Bool {
        !value.utf8.contains { $0 == UInt8(ascii: "\n") || $0 == UInt8(ascii: "\r") || $0 == 0 }
    }
}

public enum GitCredentialReplyError: Error, Equatable, CustomStringConvertible {
    /// The named attribute's value contains a newline, carriage return or NUL (or, for the password, is empty).
    case unsafeValue(String)

    public var description: String {
        switch self {
        case .unsafeValue(let key): return "the \(key) cannot be passed to git (empty, or contains a line break or NUL)"
        }
    }
}
