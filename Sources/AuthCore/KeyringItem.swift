import FoundationEssentials

/// One account's keyring item: the secret, which is the credential and nothing else (``StoredCredential/stored``),
/// and the sign-in's dates, which the store keeps outside the secret (libsecret: the item's attributes). The dates
/// are not secret; kept apart, every agent reads the secret as the bare credential, so a downgrade keeps sign-ins.
public struct KeyringItem: Sendable, Equatable {
    public var secret: Secret
    /// When the sign-in ends (``SignInDeadline``), whole Unix seconds; nil when not known.
    public var validUntil: Date?
    /// When the user was last warned of that end (``SignInExpiryWatch``), so a restarted agent does not warn twice.
    public var warnedAt: Date?

    public init(secret: Secret, validUntil: Date? = nil, warnedAt: Date? = nil) {
        self.secret = secret
        self.validUntil = validUntil
        self.warnedAt = warnedAt
    }
}
