import FoundationEssentials

/// One audit record: a token handed out or a request refused (never the token itself).
public struct AuditEntry: Codable, Sendable, Equatable {
    /// Unix time of the decision.
    public var time: Int
    public var account: String
    /// `granted`, `denied`, or `withdrawn` (the request went away while it waited for a consent answer).
    public var outcome: String
    /// Why: `open`, `listed`, `approved`, `not_listed`, `denied_by_user`, `consent_timeout`, `unidentified`,
    /// `process_exited`, `other_sender`, `unknown_forward`, `cancelled` (docs/PROTOCOL.md).
    public var reason: String
    public var scopes: [String]?
    public var resource: String?
    /// The request a DPoP proof was made for, `METHOD URL` (the URL without query and fragment); never the proof.
    public var proofFor: String?
    public var caller: WireCaller
    /// True when the record was too long for a reply page and its strings and lists were shortened
    /// (``AuditResult/clipped(_:)``); the journal has it in full.
    public var clipped: Bool?

    public init(time: Int, account: String, outcome: String, reason: String, scopes: [String]? = nil,
                resource: String? = nil, proofFor: String? = nil, caller: WireCaller, clipped: Bool? = nil) {
        self.proofFor = proofFor
        self.time = time
        self.account = account
        self.outcome = outcome
        self.reason = reason
        self.scopes = scopes
        self.resource = resource
        self.caller = caller
        self.clipped = clipped
    }

    enum CodingKeys: String, CodingKey {
        case time, account, outcome, reason, scopes, resource, proofFor = "dpop_proof_for", caller, clipped
    }

    public static let granted = "granted"
    public static let denied = "denied"
    /// The request ended before its consent question was answered (reason `cancelled`); nothing was decided.
    public static let withdrawn = "withdrawn"
}

/// The `audit` operation's result: one page of the agent's in-memory records, oldest first. A full ring of long
/// records does not fit one reply line (``WireProtocol/maxMessageBytes``), so the agent sends the newest records that
/// fit ``pageBytes`` and, when older ones remain, ``next``: the `before` of the request for the page before it.
public struct AuditResult: Codable, Sendable, Equatable {
    public var entries: [AuditEntry]
    /// How many records the agent keeps; older ones are only in the journal.
    public var capacity: Int
    /// Present when older matching records remain: ask again with `before` set to it.
    public var next: Int?

    public init(entries: [AuditEntry], capacity: Int, next: Int? = nil) {
        self.entries = entries
        self.capacity = capacity
        self.next = next
    }

    /// The encoded records of one page add up to at most this many bytes, leaving room under
    /// ``WireProtocol/maxMessageBytes`` for the reply's envelope.
    public static let pageBytes = 48 * 1024
    /// A record longer than ``pageBytes`` on its own is sent ``clipped(_:)``: each string cut to this many UTF-8
    /// bytes, at most ``clippedListCount`` scopes, relays and sandbox holes. Escaped as `\u001f` at worst (6 bytes a
    /// byte), its 15 strings and 3 × 8 list items take at most 39 × (128 × 6 + 2) bytes plus its keys, under 32 KiB,
    /// so every page holds at least one record.
    public static let clippedStringBytes = 128
    public static let clippedListCount = 8

    /// `entry` shortened to fit a page, marked `clipped`.
    public static func clipped(_ entry: AuditEntry) -> AuditEntry {
        func cut(_ text: String) -> String {
            guard text.utf8.count > clippedStringBytes else { return text }
            var bytes = 0
            var kept = String.UnicodeScalarView()
            for scalar in text.unicodeScalars {
                bytes += String(scalar).utf8.count
                if bytes > clippedStringBytes - 3 { break }
                kept.append(scalar)
            }
            return String(kept) + "…"
        }
        func cut(_ list: [String]?) -> [String]? { list.map { $0.prefix(clippedListCount).map(cut) } }
        var caller = entry.caller
        caller.via = cut(caller.via)
        caller.exe = caller.exe.map(cut)
        caller.unit = caller.unit.map(cut)
        caller.kind = cut(caller.kind)
        caller.flatpakApp = caller.flatpakApp.map(cut)
        caller.flatpakInstance = caller.flatpakInstance.map(cut)
        caller.unidentified = caller.unidentified.map(cut)
        caller.host = caller.host.map(cut)
        caller.hostKey = caller.hostKey.map(cut)
        caller.hostAlias = caller.hostAlias.map(cut)
        caller.remoteProgram = caller.remoteProgram.map(cut)
        caller.relayedBy = cut(caller.relayedBy)
        caller.notContained = cut(caller.notContained)
        return AuditEntry(time: entry.time, account: cut(entry.account), outcome: cut(entry.outcome),
                          reason: cut(entry.reason), scopes: cut(entry.scopes), resource: entry.resource.map(cut),
                          proofFor: entry.proofFor.map(cut), caller: caller, clipped: true)
    }

    /// Pages put together, oldest first (`pages` newest page first, as they are asked for).
    public static func joined(_ pages: [AuditResult]) -> AuditResult {
        AuditResult(entries: pages.reversed().flatMap(\.entries), capacity: pages.first?.capacity ?? 0)
    }
}

/// A request waiting for the user's Allow/Deny.
public struct PendingConsent: Codable, Sendable, Equatable {
    /// What `approve` and `deny` take.
    public var id: Int
    public var account: String
    /// The name the decision is remembered under (`authctl forget`): an executable path or `flatpak:APP`.
    public var client: String
    public var caller: WireCaller
    /// Unix time when the request started waiting, and the seconds left before it is refused.
    public var since: Int
    public var expiresIn: Int
    /// What `approve --this-run` would allow (`instance 1234`, `this ssh session`); absent when the caller has no
    /// such run (it can be allowed only always, or denied).
    public var run: String?
    /// A Flatpak app's name as the desktop shows it for the installed app of that id (its exported desktop file's
    /// `Name`), when this computer has one: the app's own words, shown beside its id.
    public var appName: String?
    /// A forwarded host that was allowed before under another host key than the one it presents now: that key (the
    /// newest such approval). The host's key changed since, or someone else answers under its name.
    public var previousHostKey: String?

    public init(id: Int, account: String, client: String, caller: WireCaller, since: Int, expiresIn: Int,
                run: String? = nil, appName: String? = nil, previousHostKey: String? = nil) {
        self.run = run
        self.appName = appName
        self.previousHostKey = previousHostKey
        self.id = id
        self.account = account
        self.client = client
        self.caller = caller
        self.since = since
        self.expiresIn = expiresIn
    }

    enum CodingKeys: String, CodingKey {
        case id, account, client, caller, since, expiresIn = "expires_in", run, appName = "app_name",
             previousHostKey = "previous_host_key"
    }
}

/// The `pending` operation's result.
public struct PendingResult: Codable, Sendable, Equatable {
    public var requests: [PendingConsent]
    public init(requests: [PendingConsent]) { self.requests = requests }
}

/// The `approve` and `deny` operations' result: the decision, now remembered for (account, client).
public struct ConsentResult: Codable, Sendable, Equatable {
    public var id: Int
    public var account: String
    public var client: String
    public var allowed: Bool
    /// Allowed for this run only (its Flatpak instance or ssh session), not remembered; absent otherwise.
    public var thisRun: Bool?
    public init(id: Int, account: String, client: String, allowed: Bool, thisRun: Bool? = nil) {
        self.thisRun = thisRun
        self.id = id
        self.account = account
        self.client = client
        self.allowed = allowed
    }

    enum CodingKeys: String, CodingKey { case id, account, client, allowed, thisRun = "this_run" }
}

/// The `forget` operation's result: remembered decisions dropped.
public struct ForgetResult: Codable, Sendable, Equatable {
    public struct Decision: Codable, Sendable, Equatable {
        public var account: String
        public var client: String
        public var allowed: Bool
        public init(account: String, client: String, allowed: Bool) {
            self.account = account
            self.client = client
            self.allowed = allowed
        }
    }
    public var forgotten: [Decision]
    public init(forgotten: [Decision]) { self.forgotten = forgotten }
}

/// `reload`: the configuration now in force, and what differs from the one before it.
public struct ReloadResult: Codable, Sendable, Equatable {
    /// The configuration file that was read.
    public var path: String
    /// Every configured account, in file order.
    public var accounts: [String]
    public var added: [String]
    public var removed: [String]
    /// Accounts whose settings changed. Those whose issuer, client or token settings changed lost their cached
    /// tokens (their sign-in in the keyring stays); a change of access policy or git hosts keeps them.
    public var changed: [String]
    /// `[agent]` settings that changed but take effect only when the agent starts again.
    public var needsRestart: [String]

    public init(path: String, accounts: [String], added: [String] = [], removed: [String] = [], changed: [String] = [],
                needsRestart: [String] = []) {
        self.path = path
        self.accounts = accounts
        self.added = added
        self.removed = removed
        self.changed = changed
        self.needsRestart = needsRestart
    }

    enum CodingKeys: String, CodingKey {
        case path, accounts, added, removed, changed, needsRestart = "needs_restart"
    }
}

/// An account's access policy as `status` reports it.
public struct AccountAccess: Codable, Sendable, Equatable {
    /// No policy: any process of the user may get tokens.
    public var open: Bool
    /// The `allowed_clients` entries, absent when the key is not set.
    public var allowedClients: [String]?
    /// `never` or `first-use`.
    public var confirm: String
    /// One line for people, e.g. "any process of yours (no allowed_clients)".
    public var summary: String
    /// Why entries of `allowed_clients` can match no caller at all (`ssh:HOST:22`), one sentence each; absent when
    /// every entry can match.
    public var neverMatching: [String]?

    public init(open: Bool, allowedClients: [String]?, confirm: String, summary: String, neverMatching: [String]? = nil) {
        self.open = open
        self.allowedClients = allowedClients
        self.confirm = confirm
        self.summary = summary
        self.neverMatching = neverMatching
    }

    enum CodingKeys: String, CodingKey {
        case open, allowedClients = "allowed_clients", confirm, summary, neverMatching = "never_matching"
    }
}
