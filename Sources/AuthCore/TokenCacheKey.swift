import FoundationEssentials

/// Which access token of an account a caller wants: the default one (the account's configured scopes, no resource)
/// or one for a subset of those scopes and/or an RFC 8707 resource. Normalised (sorted, deduplicated scopes; the
/// full configured set means "the account's") so equivalent requests share one cache entry.
public struct TokenCacheKey: Hashable, Sendable, CustomStringConvertible {
    /// nil: the scopes of the original grant (no `scope` parameter is sent).
    public let scopes: [String]?
    /// RFC 8707 `resource`, exactly as asked.
    public let resource: String?

    public static let `default` = TokenCacheKey(normalisedScopes: nil, resource: nil)

    init(normalisedScopes: [String]?, resource: String?) {
        self.scopes = normalisedScopes
        self.resource = resource
    }

    /// Validates a request against the account: every scope must be one it configures (RFC 6749 §6: a refresh
    /// must not exceed the original grant), and a resource must be an absolute URI without fragment (RFC 8707 §2).
    public init(scopes: [String]?, resource: String?, account: AccountConfig) throws(AuthError) {
        var normalised: [String]?
        if let scopes, !scopes.isEmpty {
            let asked = Set(scopes)
            if let bad = asked.sorted().first(where: { !TokenCacheKey.isScopeToken($0) }) {
                throw AuthError(.invalidScope, "'\(LoginSession.printable(String(bad.prefix(64))))' is not a valid OAuth scope")
            }
            let outside = asked.subtracting(account.scopes).sorted()
            guard outside.isEmpty else {
                let configured = account.scopes.isEmpty ? "none" : account.scopes.joined(separator: " ")
                throw AuthError(.invalidScope,
                    "account '\(account.name)' does not have the scope \(outside.joined(separator: " ")) (configured: \(configured)); add it to the account's `scopes` and sign in again")
            }
            let sorted = asked.sorted()
            if sorted != Set(account.scopes).sorted() { normalised = sorted }
        }
        if let resource { try TokenCacheKey.checkResource(resource) }
        self.init(normalisedScopes: normalised, resource: resource)
        guard isDefault || account.scopedTokens else {
            throw AuthError(scopes == nil ? .invalidTarget : .invalidScope,
                "account '\(account.name)' does not allow scope or resource requests; set `scoped_tokens = true` for it if its server keeps a refresh token's scope when it rotates it (Django OAuth Toolkit narrows it)")
        }
    }

    public var isDefault: Bool { scopes == nil && resource == nil }

    /// The refresh request's extra parameters. The default entry names the account's configured scopes, the ones
    /// its sign-in asked for (RFC 6749 §6 allows a refresh to repeat the original scope, and Microsoft's v2.0
    /// endpoint refuses a refresh without `scope`: AADSTS900144); a subset names itself; a resource alone keeps
    /// the granted scopes.
    func refreshFields(configuredScopes: [String]) -> [(String, String)] {
        var fields: [(String, String)] = []
        if let scopes {
            fields.append(("scope", scopes.joined(separator: " ")))
        } else if isDefault, !configuredScopes.isEmpty {
            fields.append(("scope", configuredScopes.joined(separator: " ")))
        }
        if let resource { fields.append(("resource", resource)) }
        return fields
    }

    public var description: String {
        isDefault ? "default" : "scope=\(scopes?.joined(separator: " ") ?? "(granted)") resource=\(resource ?? "(none)")"
    }

    /// RFC 6749 §3.3: scope-token = 1*( %x21 / %x23-5B / %x5D-7E ).
    static func isScopeToken(_ scope: String) -> Bool {
        !scope.isEmpty && scope.utf8.count <= 256
            && scope.utf8.allSatisfy { $0 == 0x21 || (0x23...0x5B).contains($0) || (0x5D...0x7E).contains($0) }
    }

    static func checkResource(_ resource: String) throws(AuthError) {
        let shown = LoginSession.printable(String(resource.prefix(80)))
        guard resource.utf8.count <= 2048, resource.utf8.allSatisfy({ (0x21...0x7E).contains($0) }),
              let parts = URLComponents(string: resource), let scheme = parts.scheme, !scheme.isEmpty else {
            throw AuthError(.invalidTarget, "the resource '\(shown)' is not an absolute URI")
        }
        guard parts.fragment == nil, !resource.contains("#") else {
            throw AuthError(.invalidTarget, "the resource '\(shown)' must not contain a fragment (RFC 8707)")
        }
    }
}
