import FoundationEssentials
import Logging

/// A grant's sign-in of its own (`authctl grant --scope` of an account whose server would narrow the account's own
/// sign-in on a narrower refresh: Django OAuth Toolkit, GitLab). It is an account of the broker like any other (its
/// own refresh token in the keyring, refreshed and served by the same rules), made from its account's settings with
/// the grant's scopes, under a name no configuration can give (``GrantSignIn/name(grant:account:)``), so only the
/// grant's door reaches it. It follows its account's settings on every reload, and ends with the grant: signed out
/// (its refresh token revoked at the server and deleted from the keyring) and forgotten.
public struct GrantSignIn: Sendable, Equatable {
    public var grant: String
    /// The configured account it is made from.
    public var account: String
    /// The grant's scopes; nil: its account's.
    public var scopes: [String]?
    /// The longest one of its access tokens stays valid (`--max-ttl`): served as expiring then, and revoked at the
    /// server at that age (RFC 7009); nil: as long as the server makes it.
    public var maxLifetime: Duration?

    public init(grant: String, account: String, scopes: [String]?, maxLifetime: Duration? = nil) {
        self.grant = grant
        self.account = account
        self.scopes = scopes
        self.maxLifetime = maxLifetime
    }

    /// Its account name: `ACCOUNT@grant:GRANT`, which the configuration's grammar refuses (`@`, `:`), so no request
    /// that names an account can name it.
    public var name: String { GrantSignIn.name(grant: grant, account: account) }

    public static func name(grant: String, account: String) -> String { "\(account)@grant:\(grant)" }

    /// Whether `name` is a grant's sign-in's (not a configured account): configured names never hold `@`. A byte
    /// test: ``TokenBroker/accountNames`` asks it of every account on every token request, and String's generic
    /// `contains` of a substring cost 60,000 instructions a request.
    public static func isGrantSignIn(_ name: String) -> Bool { name.utf8.contains(UInt8(ascii: "@")) }

    /// Its settings: its account's, with the grant's scopes, open to the grant alone (the grant's caller is judged
    /// against the account's name), no narrower tokens of its own and no git hosts.
    func config(from account: AccountConfig) -> AccountConfig {
        var config = account
        config.name = name
        config.scopes = scopes ?? account.scopes
        config.access = .open
        config.scopedTokens = false
        config.gitHosts = []
        return config
    }
}

extension TokenBroker {
    /// How a grant narrows account `name`'s tokens to `scopes` and `resource` (a token request's rules: scopes the
    /// account configures, a resource that is an absolute URI). Nothing is sent.
    public enum Narrowing: Sendable, Equatable {
        /// From the account's refresh token, as a token request with `scopes` is: its server keeps a refresh token's
        /// scope (`scoped_tokens = true`).
        case byRefresh
        /// With a sign-in of the grant's own: the account's server would narrow the account's own sign-in, or the
        /// grant's tokens must be its own (`ownTokens`: `--max-ttl` revokes them).
        case ownSignIn
    }

    public func narrowing(account name: String, scopes: [String]?, resource: String?,
                          ownTokens: Bool = false) throws(AuthError) -> Narrowing {
        let config = try state(name).config
        var asIfScoped = config
        asIfScoped.scopedTokens = true
        let key = try TokenCacheKey(scopes: scopes, resource: resource, account: asIfScoped)
        if !ownTokens, config.scopedTokens || key.isDefault { return .byRefresh }
        guard resource == nil else {
            throw AuthError(.invalidTarget,
                "a token for a resource comes only from the account's refresh token, and account '\(name)' does not allow that; set `scoped_tokens = true` for it if its server keeps a refresh token's scope (docs/PROVIDERS.md)")
        }
        return .ownSignIn
    }

    /// Fails unless account `name`'s server can revoke a token (RFC 7009): what `--max-ttl` ends tokens with.
    public func requireRevocation(account name: String) async throws(AuthError) {
        guard try await metadata(for: name).revocationEndpoint != nil else {
            throw AuthError(.invalidMetadata,
                "its server has no revocation endpoint (RFC 7009), so a token handed out cannot be ended before the server's own expiry; leave out --max-ttl")
        }
    }

    /// Makes (or finds again, after a restart) `signIn` an account of the broker; its refresh token, if it has one
    /// yet, is the keyring's. Fails when its account is not configured.
    public func addGrantSignIn(_ signIn: GrantSignIn) throws(AuthError) {
        let account = try state(signIn.account).config
        grantSignIns[signIn.name] = signIn
        guard accounts[signIn.name] == nil else { return }
        accounts[signIn.name] = AccountState(config: signIn.config(from: account), policy: policy, loginLimit: loginLimit)
        accountOrder.append(signIn.name)
        publish(.accountChanged(signIn.name))
    }

    /// Ends `signIn` (its grant ended): signed out, its refresh token revoked at the server and deleted from the
    /// keyring, then forgotten. Its account may be gone from the configuration: it is made again for the sign-out.
    @discardableResult
    public func endGrantSignIn(_ signIn: GrantSignIn) async -> LogoutOutcome? {
        if accounts[signIn.name] == nil { try? addGrantSignIn(signIn) }
        // Its access tokens were the grant's alone: they end with it where the server can end them.
        for entry in accounts[signIn.name]?.entries ?? [] {
            _ = await revoke(entry.cached.tokens.accessToken, hint: "access_token", account: signIn.name)
        }
        var outcome: LogoutOutcome?
        do { outcome = try await logout(account: signIn.name) } catch {
            logger.warning("a grant's sign-in could not be signed out", metadata: [
                "account": "\(signIn.name)", "error_code": "\(error.code.rawValue)"])
        }
        grantSignIns[signIn.name] = nil
        accounts[signIn.name] = nil
        accountOrder.removeAll { $0 == signIn.name }
        publish(.accountChanged(signIn.name))
        return outcome
    }
}

extension TokenBroker {
    /// A grant's sign-in's newly issued tokens with `--max-ttl`: expiring at the cap when the server makes them live
    /// longer, and revoked at the server at that age (whether or not a newer one replaced them).
    func capped(_ name: String, _ tokens: TokenSet) -> TokenSet {
        guard let cap = grantSignIns[name]?.maxLifetime else { return tokens }
        var tokens = tokens
        if tokens.nonExpiring || tokens.lifetime > cap {
            tokens.lifetime = cap
            tokens.nonExpiring = false
        }
        let token = tokens.accessToken, wait = tokens.lifetime
        Task {
            try? await time.sleep(for: wait)
            await self.endCapped(name, token)
        }
        return tokens
    }

    /// A capped token's time is up: revoked at the server, and no longer served from the cache.
    func endCapped(_ name: String, _ token: Secret) async {
        guard accounts[name] != nil else { return }  // its grant ended: its tokens were revoked with it
        for entry in accounts[name]?.entries ?? [] where entry.cached.tokens.accessToken.reveal() == token.reveal() {
            accounts[name]?.setCached(entry.key, nil)
        }
        let outcome = await revoke(token, hint: "access_token", account: name)
        logger.notice("a grant's token reached its --max-ttl and was revoked", metadata: [
            "account": "\(name)", "revoked": "\(outcome.revoked.map(String.init) ?? "n/a")",
            "error": "\(outcome.error ?? "")"])
    }
}
