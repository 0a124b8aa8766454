/// A grant's narrower tokens (`authctl grant --scope`, `--resource`): what a request through the grant is served with,
/// and whether a token the server gave stays within the grant. Pure; the service asks it before and after the broker.
extension ClientIdentity.Grant {
    /// Whether the grant narrows its tokens at all.
    public var narrows: Bool { scopes != nil || resource != nil }

    /// The scopes and resource a request through this grant is served with: what it asked within the grant, the
    /// grant's own where it asked for none. Nil when it asked for a scope or a resource outside the grant (refused,
    /// never widened).
    public func served(scopes asked: [String]?, resource askedResource: String?) -> (scopes: [String]?, resource: String?)? {
        var scopes = asked.flatMap { $0.isEmpty ? nil : $0 }
        if let granted = self.scopes {
            if let asking = scopes {
                guard Set(asking).isSubset(of: granted) else { return nil }
            } else {
                scopes = granted
            }
        }
        var resource = askedResource
        if let granted = self.resource {
            guard resource == nil || resource == granted else { return nil }
            resource = granted
        }
        return (scopes, resource)
    }

    /// Whether a token with `given` scopes (the server's `scope`, else what was asked) stays within the grant. A
    /// server that ignores a narrower scope on refresh (GitHub) answers with the account's: that token is not served.
    /// Unknown scopes under a grant that narrows them are not within it.
    public func holds(_ given: [String]?) -> Bool {
        guard let granted = scopes else { return true }
        guard let given else { return false }
        return Set(given).isSubset(of: granted)
    }
}
