#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Synchronization

/// A lock-protected copy of every account's cached default access token, which ``TokenBroker`` publishes whenever
/// an account's cache changes (sign-in, refresh, logout, `invalid_grant`: one publish point, `AccountState`'s
/// observers), so a front end can answer a plain cached `token` request synchronously, without a hop onto the
/// broker actor (the socket server's fast path, docs/ARCHITECTURE.md).
///
/// It serves only what the broker itself would serve without any work: a token that satisfies `minValid` under
/// the same ``RefreshPolicy/isFresh(expiresAt:lifetime:now:minValid:)`` rule **and** has not reached its
/// early-refresh moment. Inside the margin the broker serves the token and starts a refresh behind the caller; the snapshot
/// answers nil there, so such requests take the broker's path and keep that behaviour.
///
/// Fast-path use is recorded here (the caller asked for the account at `now`) and the broker reads it back, so
/// proactive refresh (``RefreshPolicy/recentUse``) still sees accounts that are only used through the fast path;
/// the first use of an idle account rings ``useBell``, the proactive loop's bell, whose sleep did not count it.
public final class TokenSnapshot: Sendable {
    /// One account's cached token as the broker last published it.
    public struct Entry: Sendable {
        public var accessToken: Secret
        public var tokenType: String
        /// The token's scopes, or the account's configured ones when the server did not say (as ``AccessTokenGrant``).
        public var scopes: [String]?
        public var expiresAt: ContinuousClock.Instant
        /// The lifetime the server gave the token (``RefreshPolicy/isFresh(expiresAt:lifetime:now:minValid:)``).
        public var lifetime: Duration
        /// The server gave the token no expiry (``TokenSet/nonExpiring``); ``expiresAt`` is then only the cache's.
        public var doesNotExpire: Bool
        /// The early-refresh moment (``RefreshPolicy/refreshAt(receivedAt:lifetime:jitter:)`` with the token's jitter).
        public var refreshAt: ContinuousClock.Instant
        /// Changes on every publish.
        public var generation: UInt64
        /// What a reader derived from this entry, opaque here (the socket front end keeps its pre-encoded reply bytes
        /// in it), see ``attach(_:account:generation:)``. It lives in the entry's slot rather than in a cache of the
        /// reader's own because it goes with the entry, under the same lock, when the entry is replaced or removed:
        /// bytes that carry the token never outlive it (a logout leaves no copy behind), and a hit finds it without
        /// a second lookup.
        public var attachment: (any AnyObject & Sendable)?
    }

    /// A token the snapshot may hand out: its entry (one reference, not a copy), how long it stays valid and when it
    /// expires by the wall clock, read once at the lookup. ``grant`` builds the grant exactly as the broker does,
    /// only when asked (the socket's pre-encoded replies need just the two times).
    public struct Hit: Sendable {
        public var account: String
        let stored: Stored
        public var generation: UInt64
        public var attachment: (any AnyObject & Sendable)?
        public var expiresIn: Duration
        public var expiresAt: Date

        public var entry: Entry { stored.entry }

        public var grant: AccessTokenGrant {
            AccessTokenGrant(account: account, accessToken: entry.accessToken, tokenType: entry.tokenType,
                             expiresIn: expiresIn, expiresAt: expiresAt, scopes: entry.scopes, idToken: nil,
                             doesNotExpire: entry.doesNotExpire)
        }
    }

    /// A published entry, boxed: a hit takes a reference instead of copying its fields.
    final class Stored: Sendable {
        let entry: Entry
        init(_ entry: Entry) { self.entry = entry }
    }

    /// One account's entry, its attachment, and when the snapshot last served it (kept after the entry goes), under
    /// one key so a hit costs one lookup. Only touched under `state`'s lock.
    private final class Slot: @unchecked Sendable {
        var stored: Stored?
        var attachment: (any AnyObject & Sendable)?
        var lastUsed: ContinuousClock.Instant?
    }

    private struct State {
        var accounts: [String: Slot] = [:]
        var generation: UInt64 = 0
    }

    let policy: RefreshPolicy
    let time: any TimeSource
    /// Rung when an idle account is used through the snapshot (the broker's proactive loop sleeps on it).
    let useBell = Doorbell()
    private let state = Mutex(State())

    public init(policy: RefreshPolicy, time: any TimeSource) {
        self.policy = policy
        self.time = time
    }

    /// The account's token if the broker would serve it from its cache without starting any work, recording the
    /// use; nil otherwise (no token, not valid for `minValid`, or inside the early-refresh margin).
    public func freshToken(account: String, minValid: Duration) -> Hit? {
        let now = time.now()
        let wall = time.wallClock()
        var wasIdle = false
        let hit = state.withLock { state -> Hit? in
            guard let slot = state.accounts[account], let stored = slot.stored,
                  policy.isFresh(expiresAt: stored.entry.expiresAt, lifetime: stored.entry.lifetime, now: now,
                                 minValid: minValid),
                  now < stored.entry.refreshAt else { return nil }
            wasIdle = slot.lastUsed.map { now - $0 > policy.recentUse } ?? true
            slot.lastUsed = now
            let remaining = stored.entry.expiresAt - now
            return Hit(account: account, stored: stored, generation: stored.entry.generation, attachment: slot.attachment,
                       expiresIn: remaining, expiresAt: TokenBroker.wallClockInstant(wall, plus: remaining))
        }
        if wasIdle { useBell.ring() }
        return hit
    }

    /// Keeps `attachment` with the account's entry while it is still the one of `generation`.
    public func attach(_ attachment: any AnyObject & Sendable, account: String, generation: UInt64) {
        state.withLock { state in
            guard let slot = state.accounts[account], slot.stored?.entry.generation == generation else { return }
            slot.attachment = attachment
        }
    }

    /// When the snapshot last served `account` (nil if never).
    public func lastUse(_ account: String) -> ContinuousClock.Instant? {
        state.withLock { $0.accounts[account]?.lastUsed }
    }

    /// Replaces (or, with nil, removes) the account's entry. Only the broker publishes.
    func publish(_ account: String, _ entry: Entry?) {
        state.withLock { state in
            let slot = state.accounts[account] ?? {
                let slot = Slot()
                state.accounts[account] = slot
                return slot
            }()
            slot.attachment = nil
            guard var entry else {
                slot.stored = nil
                return
            }
            state.generation &+= 1
            entry.generation = state.generation
            entry.attachment = nil
            slot.stored = Stored(entry)
        }
    }

    /// The current entry, for tests and `status`-like readers.
    public func entry(_ account: String) -> Entry? {
        state.withLock { state in
            guard let slot = state.accounts[account], var entry = slot.stored?.entry else { return nil }
            entry.attachment = slot.attachment
            return entry
        }
    }
}
