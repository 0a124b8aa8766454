/// One cached access token of the broker: an account's default token or one of its scoped ones.
public struct TokenEntry: Hashable, Sendable, CustomStringConvertible {
    public let account: String
    public let key: TokenCacheKey

    public init(account: String, key: TokenCacheKey) {
        self.account = account
        self.key = key
    }

    public var description: String { "\(account) (\(key))" }
}
