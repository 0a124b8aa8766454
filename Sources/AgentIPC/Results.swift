import FoundationEssentials

// The result payloads of protocol version 1. Times are Unix seconds; durations are whole seconds.

public struct PingResult: Codable, Sendable, Equatable {
    public var agentVersion: String
    public var protocolVersion: Int
    public init(agentVersion: String, protocolVersion: Int = WireProtocol.version) {
        self.agentVersion = agentVersion
        self.protocolVersion = protocolVersion
    }
    enum CodingKeys: String, CodingKey { case agentVersion = "agent_version", protocolVersion = "protocol" }
}

/// When a token stops being valid, as the `token` reply says it.
public enum TokenExpiry: Sendable, Equatable {
    /// Valid for `seconds` more, until Unix time `unixTime` (`expires_in`, `expires_at`).
    case after(seconds: Int, unixTime: Int)
    /// The server gave the token no expiry and no refresh token (a GitHub OAuth app's): it is valid until revoked.
    /// On the wire `does_not_expire: true`, with `expires_in` and `expires_at` absent.
    case never
}

public struct TokenResult: Codable, Sendable, Equatable {
    public var account: String
    public var accessToken: String
    public var tokenType: String
    public var expiry: TokenExpiry
    public var scopes: [String]?
    public var idToken: String?
    /// A DPoP proof for the request the caller named (`dpop_method`, `dpop_url`), made with the key the token is
    /// bound to; absent for a Bearer token or when none was asked for.
    public var dpopProof: String?

    public init(account: String, accessToken: String, tokenType: String, expiry: TokenExpiry,
                scopes: [String]?, idToken: String?, dpopProof: String? = nil) {
        self.dpopProof = dpopProof
        self.account = account
        self.accessToken = accessToken
        self.tokenType = tokenType
        self.expiry = expiry
        self.scopes = scopes
        self.idToken = idToken
    }

    /// Seconds the token stays valid; nil when it does not expire.
    public var expiresIn: Int? {
        if case .after(let seconds, _) = expiry { return seconds }
        return nil
    }

    /// Unix time the token expires at; nil when it does not expire.
    public var expiresAt: Int? {
        if case .after(_, let unixTime) = expiry { return unixTime }
        return nil
    }

    enum CodingKeys: String, CodingKey {
        case account, accessToken = "access_token", tokenType = "token_type", expiresIn = "expires_in",
             expiresAt = "expires_at", doesNotExpire = "does_not_expire", scopes, idToken = "id_token",
             dpopProof = "dpop_proof"
    }

    /// A reply must say when the token expires or that it does not: `expires_in` and `expires_at`, or
    /// `does_not_expire: true` (then any `expires_*` member is ignored).
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        account = try container.decode(String.self, forKey: .account)
        accessToken = try container.decode(String.self, forKey: .accessToken)
        tokenType = try container.decode(String.self, forKey: .tokenType)
        if try container.decodeIfPresent(Bool.self, forKey: .doesNotExpire) == true {
            expiry = .never
        } else {
            expiry = .after(seconds: try container.decode(Int.self, forKey: .expiresIn),
                            unixTime: try container.decode(Int.self, forKey: .expiresAt))
        }
        scopes = try container.decodeIfPresent([String].self, forKey: .scopes)
        idToken = try container.decodeIfPresent(String.self, forKey: .idToken)
        dpopProof = try container.decodeIfPresent(String.self, forKey: .dpopProof)
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(account, forKey: .account)
        try container.encode(accessToken, forKey: .accessToken)
        try container.encode(tokenType, forKey: .tokenType)
        switch expiry {
        case .after(let seconds, let unixTime):
            try container.encode(seconds, forKey: .expiresIn)
            try container.encode(unixTime, forKey: .expiresAt)
        case .never:
            try container.encode(true, forKey: .doesNotExpire)
        }
        try container.encodeIfPresent(scopes, forKey: .scopes)
        try container.encodeIfPresent(idToken, forKey: .idToken)
        try container.encodeIfPresent(dpopProof, forKey: .dpopProof)
    }
}

public struct LoginResult: Codable, Sendable, Equatable {
    public var account: String
    public var subject: String?
    public var email: String?
    public var name: String?
    public var scopes: [String]?
    public var hasRefreshToken: Bool
    /// Nil when the access token does not expire (``accessTokenDoesNotExpire``).
    public var accessTokenExpiresAt: Int?
    /// The access token has no expiry (``TokenExpiry/never``): `access_token_expires_at` is then absent.
    public var accessTokenDoesNotExpire: Bool
    /// The sign-in is kept in the agent's memory only (no Secret Service): it ends when the agent stops.
    /// `kept_in_memory`, present only when true.
    public var keptInMemory: Bool

    public init(account: String, subject: String?, email: String?, name: String?, scopes: [String]?,
                hasRefreshToken: Bool, accessTokenExpiresAt: Int?, keptInMemory: Bool = false) {
        self.account = account
        self.subject = subject
        self.email = email
        self.name = name
        self.scopes = scopes
        self.hasRefreshToken = hasRefreshToken
        self.accessTokenExpiresAt = accessTokenExpiresAt
        self.accessTokenDoesNotExpire = accessTokenExpiresAt == nil
        self.keptInMemory = keptInMemory
    }

    enum CodingKeys: String, CodingKey {
        case account, subject, email, name, scopes, hasRefreshToken = "has_refresh_token",
             accessTokenExpiresAt = "access_token_expires_at", accessTokenDoesNotExpire = "access_token_does_not_expire",
             keptInMemory = "kept_in_memory"
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        account = try container.decode(String.self, forKey: .account)
        subject = try container.decodeIfPresent(String.self, forKey: .subject)
        email = try container.decodeIfPresent(String.self, forKey: .email)
        name = try container.decodeIfPresent(String.self, forKey: .name)
        scopes = try container.decodeIfPresent([String].self, forKey: .scopes)
        hasRefreshToken = try container.decode(Bool.self, forKey: .hasRefreshToken)
        accessTokenDoesNotExpire = try container.decodeIfPresent(Bool.self, forKey: .accessTokenDoesNotExpire) ?? false
        accessTokenExpiresAt = accessTokenDoesNotExpire
            ? nil : try container.decode(Int.self, forKey: .accessTokenExpiresAt)
        keptInMemory = try container.decodeIfPresent(Bool.self, forKey: .keptInMemory) ?? false
    }

    /// `access_token_does_not_expire` only when true, so a reply about an expiring token is what it always was.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(account, forKey: .account)
        try container.encodeIfPresent(subject, forKey: .subject)
        try container.encodeIfPresent(email, forKey: .email)
        try container.encodeIfPresent(name, forKey: .name)
        try container.encodeIfPresent(scopes, forKey: .scopes)
        try container.encode(hasRefreshToken, forKey: .hasRefreshToken)
        if accessTokenDoesNotExpire {
            try container.encode(true, forKey: .accessTokenDoesNotExpire)
        } else {
            try container.encodeIfPresent(accessTokenExpiresAt, forKey: .accessTokenExpiresAt)
        }
        if keptInMemory { try container.encode(true, forKey: .keptInMemory) }
    }
}

public struct LogoutResult: Codable, Sendable, Equatable {
    public var account: String
    public var hadRefreshToken: Bool
    /// null when no revocation was attempted (no token or no revocation endpoint).
    public var revoked: Bool?
    public var revocationError: String?

    public init(account: String, hadRefreshToken: Bool, revoked: Bool?, revocationError: String?) {
        self.account = account
        self.hadRefreshToken = hadRefreshToken
        self.revoked = revoked
        self.revocationError = revocationError
    }

    enum CodingKeys: String, CodingKey {
        case account, hadRefreshToken = "had_refresh_token", revoked, revocationError = "revocation_error"
    }

    /// `revoked` is always present: null means "not attempted", which differs from false ("attempted, failed").
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(account, forKey: .account)
        try container.encode(hadRefreshToken, forKey: .hadRefreshToken)
        try container.encode(revoked, forKey: .revoked)
        try container.encodeIfPresent(revocationError, forKey: .revocationError)
    }
}

public struct AccountSummary: Codable, Sendable, Equatable {
    public var name: String
    public var issuer: String
    public var clientID: String
    public var redirectURI: String
    public var scopes: [String]
    /// `git_hosts` from config.toml; absent when the account has none.
    public var gitHosts: [String]?

    public init(name: String, issuer: String, clientID: String, redirectURI: String, scopes: [String], gitHosts: [String]? = nil) {
        self.name = name
        self.issuer = issuer
        self.clientID = clientID
        self.redirectURI = redirectURI
        self.scopes = scopes
        self.gitHosts = gitHosts
    }

    enum CodingKeys: String, CodingKey {
        case name, issuer, clientID = "client_id", redirectURI = "redirect_uri", scopes, gitHosts = "git_hosts"
    }
}

public struct AccountsResult: Codable, Sendable, Equatable {
    public var accounts: [AccountSummary]
    public init(accounts: [AccountSummary]) { self.accounts = accounts }
}

public struct StatusResult: Codable, Sendable, Equatable {
    /// The agent itself. A confined caller (``StatusResult/view``: a forwarded host, an app, a container) is not shown
    /// what belongs to the desktop: `pid`, `socket`, the keyring members and `store` are then absent.
    public struct Agent: Codable, Sendable, Equatable {
        public var version: String
        public var protocolVersion: Int
        /// Absent for a confined caller.
        public var pid: Int?
        public var uptimeSeconds: Int
        /// Absent for a confined caller.
        public var socket: String?
        /// available, locked, absent, error, or unused (`store = "memory"`); absent for a confined caller.
        public var keyring: String?
        /// The program that answers as the Secret Service (its executable's path, or its process name); absent when
        /// none does or the agent cannot tell.
        public var keyringService: String?
        /// What to do about the keyring, in the words of the Secret Service that answers; absent when it is available.
        public var keyringAdvice: String?
        /// Where sign-ins are kept (`[agent] store`): auto, secret-service or memory. Absent from older agents.
        public var store: String?
        /// The name of the computer the agent runs on (its host name), so that a host or an app can say whose agent
        /// answers. Absent from older agents.
        public var hostname: String?
        /// What locks the user's session now, in words (logind's hint, `authctl lock`); absent when it is not locked,
        /// and for a confined caller.
        public var sessionLocked: String?

        public init(version: String, pid: Int?, uptimeSeconds: Int, socket: String?, keyring: String?,
                    keyringService: String? = nil, keyringAdvice: String? = nil, store: String? = nil,
                    hostname: String? = nil, sessionLocked: String? = nil) {
            self.sessionLocked = sessionLocked
            self.version = version
            self.protocolVersion = WireProtocol.version
            self.pid = pid
            self.uptimeSeconds = uptimeSeconds
            self.socket = socket
            self.keyring = keyring
            self.keyringService = keyringService
            self.keyringAdvice = keyringAdvice
            self.store = store
            self.hostname = hostname
        }

        enum CodingKeys: String, CodingKey {
            case version, protocolVersion = "protocol", pid, uptimeSeconds = "uptime_s", socket, keyring,
                 keyringService = "keyring_service", keyringAdvice = "keyring_advice", store, hostname,
                 sessionLocked = "session_locked"
        }
    }

    public struct LastError: Codable, Sendable, Equatable {
        public var code: String
        public var message: String
        public var at: Int
        public init(code: String, message: String, at: Int) {
            self.code = code
            self.message = message
            self.at = at
        }
    }

    public struct Account: Codable, Sendable, Equatable {
        public var name: String
        public var issuer: String
        public var clientID: String
        public var redirectURI: String
        public var scopes: [String]
        /// true/false when the keyring could be asked; null when it is locked or absent.
        public var signedIn: Bool?
        public var accessTokenExpiresAt: Int?
        public var accessTokenExpiresIn: Int?
        /// true: the cached access token does not expire (the two `access_token_expires_*` are then absent); absent
        /// otherwise.
        public var accessTokenDoesNotExpire: Bool?
        public var lastRefresh: Int?
        public var lastError: LastError?
        public var loginPending: Bool
        /// Access tokens cached for a scope subset and/or resource; absent when there are none.
        public var scopedTokens: [ScopedToken]?
        /// Which local programs may get this account's tokens (`allowed_clients`, `confirm`).
        public var access: AccountAccess?
        /// When the sign-in ends (Unix seconds), when the server or the configuration says; in the past: the
        /// account needs a new sign-in. Absent when unknown.
        public var signInValidUntil: Int?
        /// Whether that date has passed, by the agent's clock (`sign-in ended` in the human output); present with
        /// ``signInValidUntil``. `signedIn` stays true while the refresh token is kept.
        public var signInEnded: Bool?
        /// true: the sign-in lives in the agent's memory only and ends when the agent stops; absent otherwise.
        public var keptInMemory: Bool?
        /// Why the sign-in could not be moved into a Secret Service that appeared; absent otherwise.
        public var keyringMoveError: String?
        /// What DPoP binds, when the agent knows: `access_token`, `refresh_token` (only the refresh token), or
        /// `refused` (the server refused the proof at sign-in, which went on without DPoP); absent otherwise.
        public var dpop: String?
        /// Where the DPoP key is, when the agent has it loaded: `tpm` (held by the TPM, `dpop_key`) or `software`.
        public var dpopKey: String?

        public init(name: String, issuer: String, clientID: String, redirectURI: String, scopes: [String],
                    signedIn: Bool?, accessTokenExpiresAt: Int?, accessTokenExpiresIn: Int?, lastRefresh: Int?,
                    lastError: LastError?, loginPending: Bool, scopedTokens: [ScopedToken]? = nil,
                    access: AccountAccess? = nil, signInValidUntil: Int? = nil, accessTokenDoesNotExpire: Bool? = nil,
                    signInEnded: Bool? = nil, keptInMemory: Bool? = nil, keyringMoveError: String? = nil,
                    dpop: String? = nil, dpopKey: String? = nil) {
            self.dpop = dpop
            self.dpopKey = dpopKey
            self.keptInMemory = keptInMemory
            self.keyringMoveError = keyringMoveError
            self.accessTokenDoesNotExpire = accessTokenDoesNotExpire
            self.signInEnded = signInEnded
            self.scopedTokens = scopedTokens
            self.signInValidUntil = signInValidUntil
            self.name = name
            self.issuer = issuer
            self.clientID = clientID
            self.redirectURI = redirectURI
            self.scopes = scopes
            self.signedIn = signedIn
            self.accessTokenExpiresAt = accessTokenExpiresAt
            self.accessTokenExpiresIn = accessTokenExpiresIn
            self.lastRefresh = lastRefresh
            self.lastError = lastError
            self.loginPending = loginPending
            self.access = access
        }

        enum CodingKeys: String, CodingKey {
            case name, issuer, clientID = "client_id", redirectURI = "redirect_uri", scopes, signedIn = "signed_in",
                 accessTokenExpiresAt = "access_token_expires_at", accessTokenExpiresIn = "access_token_expires_in",
                 accessTokenDoesNotExpire = "access_token_does_not_expire", lastRefresh = "last_refresh", lastError = "last_error", loginPending = "login_pending",
                 scopedTokens = "scoped_tokens", access, signInValidUntil = "sign_in_valid_until",
                 signInEnded = "sign_in_ended", keptInMemory = "kept_in_memory", keyringMoveError = "keyring_move_error",
                 dpop, dpopKey = "dpop_key"
        }

        /// `signed_in` is always present: null means "unknown" (keyring locked or absent).
        public func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(name, forKey: .name)
            try container.encode(issuer, forKey: .issuer)
            try container.encode(clientID, forKey: .clientID)
            try container.encode(redirectURI, forKey: .redirectURI)
            try container.encode(scopes, forKey: .scopes)
            try container.encode(signedIn, forKey: .signedIn)
            try container.encodeIfPresent(accessTokenExpiresAt, forKey: .accessTokenExpiresAt)
            try container.encodeIfPresent(accessTokenExpiresIn, forKey: .accessTokenExpiresIn)
            try container.encodeIfPresent(accessTokenDoesNotExpire, forKey: .accessTokenDoesNotExpire)
            try container.encodeIfPresent(lastRefresh, forKey: .lastRefresh)
            try container.encodeIfPresent(lastError, forKey: .lastError)
            try container.encode(loginPending, forKey: .loginPending)
            try container.encodeIfPresent(scopedTokens, forKey: .scopedTokens)
            try container.encodeIfPresent(access, forKey: .access)
            try container.encodeIfPresent(signInValidUntil, forKey: .signInValidUntil)
            try container.encodeIfPresent(signInEnded, forKey: .signInEnded)
            try container.encodeIfPresent(keptInMemory, forKey: .keptInMemory)
            try container.encodeIfPresent(keyringMoveError, forKey: .keyringMoveError)
            try container.encodeIfPresent(dpop, forKey: .dpop)
            try container.encodeIfPresent(dpopKey, forKey: .dpopKey)
        }
    }

    /// One access token for a scope subset and/or an RFC 8707 resource (`scoped_tokens = true`).
    public struct ScopedToken: Codable, Sendable, Equatable {
        /// Absent: the account's granted scopes.
        public var scopes: [String]?
        public var resource: String?
        /// Both absent for a token that does not expire (``doesNotExpire``).
        public var expiresAt: Int?
        public var expiresIn: Int?
        /// true: the token has no expiry; absent otherwise.
        public var doesNotExpire: Bool?

        public init(scopes: [String]?, resource: String?, expiresAt: Int?, expiresIn: Int?, doesNotExpire: Bool? = nil) {
            self.scopes = scopes
            self.resource = resource
            self.expiresAt = expiresAt
            self.expiresIn = expiresIn
            self.doesNotExpire = doesNotExpire
        }

        enum CodingKeys: String, CodingKey {
            case scopes, resource, expiresAt = "expires_at", expiresIn = "expires_in", doesNotExpire = "does_not_expire"
        }
    }

    /// An open `authctl forward` session (absent from the status a forwarded host or a sandboxed app is shown).
    public struct Forward: Codable, Sendable, Equatable {
        /// The host as ssh checks its key (HostKeyAlias, else HostName[:PORT]).
        public var host: String
        /// The name the person typed (a `Host` alias), when it is not `host`; requests through the session are
        /// audited with `via` `ssh:ALIAS`, else `ssh:HOST`.
        public var alias: String?
        /// The host key ssh was shown (SHA256 fingerprint); absent until ssh said.
        public var hostKey: String?
        /// The ssh process the session serves; absent until authctl named it.
        public var sshPID: Int?
        /// Unix time the session opened.
        public var since: Int

        public init(host: String, alias: String? = nil, hostKey: String?, sshPID: Int?, since: Int) {
            self.host = host
            self.alias = alias
            self.hostKey = hostKey
            self.sshPID = sshPID
            self.since = since
        }

        enum CodingKeys: String, CodingKey { case host, alias, hostKey = "host_key", sshPID = "ssh_pid", since }
    }

    /// A grant (`authctl grant`; absent from the status a confined caller is shown).
    public struct Grant: Codable, Sendable, Equatable {
        public var name: String
        public var accounts: [String]
        /// Its socket; a workload gets the grant by having the socket's directory mounted.
        public var socket: String
        /// Unix times: made, ends (absent: no time limit), last served (absent: never since the agent started).
        public var created: Int
        public var expires: Int?
        /// The process it is tied to: it ends when that exits.
        public var whilePID: Int?
        /// Requests served through it since the agent started.
        public var uses: Int
        public var lastUse: Int?
        /// Where its DPoP proofs may be used; absent: anywhere.
        public var dpopURLs: [String]?
        /// Not served while the user's session is locked (true or absent).
        public var lockWithSession: Bool?
        /// The scopes its tokens are narrowed to, and the resource they are for; absent: the account's.
        public var scopes: [String]?
        public var resource: String?
        /// Its accounts served from a sign-in of its own (made with the grant, revoked with it); absent: none.
        public var ownSignIns: [String]?
        /// The longest a token handed through it stays valid, in seconds; absent: as long as the provider makes it.
        public var maxTTL: Int?

        public init(name: String, accounts: [String], socket: String, created: Int, expires: Int?, whilePID: Int?,
                    uses: Int, lastUse: Int?, dpopURLs: [String]? = nil, lockWithSession: Bool? = nil,
                    scopes: [String]? = nil, resource: String? = nil, ownSignIns: [String]? = nil, maxTTL: Int? = nil) {
            self.ownSignIns = ownSignIns
            self.maxTTL = maxTTL
            self.scopes = scopes
            self.resource = resource
            self.dpopURLs = dpopURLs
            self.lockWithSession = lockWithSession
            self.name = name
            self.accounts = accounts
            self.socket = socket
            self.created = created
            self.expires = expires
            self.whilePID = whilePID
            self.uses = uses
            self.lastUse = lastUse
        }

        enum CodingKeys: String, CodingKey {
            case name, accounts, socket, created, expires, whilePID = "while_pid", uses, lastUse = "last_use",
                 dpopURLs = "dpop_urls", lockWithSession = "lock_with_session", scopes, resource,
                 ownSignIns = "own_sign_ins", maxTTL = "max_ttl"
        }

        /// The directory a workload mounts (the socket's).
        public var directory: String { String(socket[..<(socket.lastIndex(of: "/") ?? socket.endIndex)]) }
    }

    public var agent: Agent
    public var accounts: [Account]
    public var forwards: [Forward]?
    public var grants: [Grant]?
    /// How the agent sees the caller: ``WireCaller/Kind``'s raw value (`desktop`, `ssh_host`, `flatpak`, ...). Absent
    /// from older agents.
    public var view: String?
    /// The `allowed_clients` entry that names the caller (`ssh:build-box`, `flatpak:org.example.App`); for a caller
    /// through a grant (`view` `grant`), the grant's name. Absent when none can, and for a program of the desktop
    /// (named by its path).
    public var namedBy: String?

    public init(agent: Agent, accounts: [Account], forwards: [Forward]? = nil, grants: [Grant]? = nil, view: String? = nil,
                namedBy: String? = nil) {
        self.agent = agent
        self.accounts = accounts
        self.forwards = forwards
        self.grants = grants
        self.view = view
        self.namedBy = namedBy
    }

    enum CodingKeys: String, CodingKey { case agent, accounts, forwards, grants, view, namedBy = "named_by" }

    /// The caller is confined (a forwarded host, an app, a container, an unidentified caller): what it sees is cut
    /// to the accounts it may use. A kind this client does not know counts as confined; an older agent's status
    /// (no `view`) as the desktop's.
    public var isConfinedView: Bool {
        guard let view else { return false }
        return view != WireCaller.Kind.desktop.rawValue && view != WireCaller.Kind.hostContainer.rawValue
    }
}

/// `forward`: the session ended (its client went away, or `forward_stop`).
public struct ForwardResult: Codable, Sendable, Equatable {
    public var host: String
    /// `stopped` (forward_stop) or `closed` (its client went away).
    public var ended: String

    public init(host: String, ended: String) {
        self.host = host
        self.ended = ended
    }
}

/// `forward_ssh`, `forward_host_key`, `forward_stop`: done; `stopped` lists the sessions `forward_stop` ended.
public struct ForwardChangeResult: Codable, Sendable, Equatable {
    public var stopped: [String]?

    public init(stopped: [String]? = nil) { self.stopped = stopped }
}

/// `lock`, `unlock`: whether the session counts as locked now, and by what (`logind`'s hint, `authctl lock`).
public struct LockResult: Codable, Sendable, Equatable {
    public var locked: Bool
    /// What locks it, in words; absent when it is not locked.
    public var lockedBy: String?
    /// logind's hint on the display session; absent when the agent cannot read it.
    public var logind: Bool?

    public init(locked: Bool, lockedBy: String?, logind: Bool?) {
        self.locked = locked
        self.lockedBy = lockedBy
        self.logind = logind
    }

    enum CodingKeys: String, CodingKey { case locked, lockedBy = "locked_by", logind }
}

/// `grant`: the grant made (as `status` lists it); `grant_revoke`: the grant ended.
public struct GrantResult: Codable, Sendable, Equatable {
    public var grant: StatusResult.Grant

    public init(grant: StatusResult.Grant) { self.grant = grant }
}

/// `login_callback`: the pasted redirect was accepted and handed to the pending sign-in; the `login` request that
/// started it receives the sign-in's result.
public struct LoginCallbackResult: Codable, Sendable, Equatable {
    public var account: String
    public var accepted: Bool

    public init(account: String, accepted: Bool) {
        self.account = account
        self.accepted = accepted
    }
}
