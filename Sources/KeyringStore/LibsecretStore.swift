import AuthCore
import CLibsecret
import FoundationEssentials

/// A ``SecretStore`` over libsecret: refresh tokens live in the Secret Service's default collection (the GNOME
/// login keyring, or the group of KeePassXC's open database that is exposed to the Secret Service), one item per
/// ``SecretKey`` under the schema `dev.auth-agent.RefreshToken` with the attributes `account`, `issuer` and
/// `client_id`, and, when known, `valid_until` and `warned_at` (``KeyringItem``'s dates, as decimal Unix seconds: not
/// secret, so never in the secret, which is the bare credential).
///
/// Every call runs off the Swift concurrency pool on one serial queue and gives up after `timeout` (a stopped
/// daemon, or an unlock prompt nobody answers, would otherwise block for ~50 s). Errors map to
/// `keyringLocked`, `keyringUnavailable` (no Secret Service on the bus) and `keyringError`; no message ever
/// contains a secret.
///
/// A locked collection hides its items: ``load(_:)`` then returns nil without an error, so callers that get nil
/// ask ``state()`` before concluding that there is no token. A locked one is never searched or written (KeePassXC
/// would answer with a dialog and hold the call until the timeout): writes and deletes fail with ``lockedError()``.
public final class LibsecretStore: SecretStore {
    /// How long one keyring call may take.
    public let timeout: Duration
    private let label: @Sendable (SecretKey) -> String
    private let caller: LibsecretCaller

    /// - Parameters:
    ///   - timeout: how long one keyring call may take before it is cancelled and fails with `keyringError`.
    ///   - label: the item label people see in Seahorse / `secret-tool search`. Never put the secret in it.
    public init(
        timeout: Duration = .seconds(20),
        label: @escaping @Sendable (SecretKey) -> String = LibsecretStore.defaultLabel
    ) {
        self.timeout = timeout
        self.label = label
        self.caller = LibsecretCaller(timeout: timeout)
    }

    /// `auth-agent refresh token for <account> (<issuer>)`.
    @Sendable public static func defaultLabel(_ key: SecretKey) -> String {
        "auth-agent refresh token for \(key.account) (\(key.issuer))"
    }

    public func loadItem(_ key: SecretKey) async throws(AuthError) -> KeyringItem? {
        let outcome = await caller.call { cancellable, error -> KeyringItem? in
            // A locked or missing default collection is not searched: it hides our items anyway (nil, which the
            // caller checks against state()), and KeePassXC answers such a search with its unlock or open dialog
            // (UnlockBeforeSearch, its default), which would hold the call until its timeout.
            guard LibsecretStore.inspect(cancellable, error).raw == AA_KEYRING_AVAILABLE else { return nil }
            return LibsecretStore.withAttributes(key) { account, issuer, clientID in
                var validUntil: UnsafeMutablePointer<gchar>?
                var warnedAt: UnsafeMutablePointer<gchar>?
                defer {
                    aa_secret_string_free(validUntil)
                    aa_secret_string_free(warnedAt)
                }
                guard let found = aa_secret_lookup_item(account, issuer, clientID, &validUntil, &warnedAt,
                                                        cancellable, error) else { return nil }
                // Copy into Swift, then let libsecret wipe and free its copy.
                defer { aa_secret_free(found) }
                return KeyringItem(secret: Secret(String(cString: found)),
                                   validUntil: LibsecretStore.date(validUntil), warnedAt: LibsecretStore.date(warnedAt))
            }
        }
        if let failure = outcome.failure { throw authError(failure) }
        return outcome.value ?? nil
    }

    /// An attribute's Unix seconds; nil when absent or not a decimal integer (someone else's edit: not known).
    private static func date(_ attribute: UnsafeMutablePointer<gchar>?) -> Date? {
        guard let attribute, let seconds = Int64(String(cString: attribute)) else { return nil }
        return Date(timeIntervalSince1970: TimeInterval(seconds))
    }

    /// A date as its attribute value: whole Unix seconds, rounded down.
    private static func attribute(_ date: Date?) -> String? {
        date.map { String(Int64($0.timeIntervalSince1970.rounded(.down))) }
    }

    /// One search over the schema's items, reading their attributes only: which accounts have a token, without a
    /// secret crossing the bus (`status` asks this instead of loading every account's token).
    public func storedKeys() async throws(AuthError) -> Set<SecretKey> {
        let outcome = await caller.call { cancellable, error -> Set<SecretKey>? in
            guard let strings = aa_secret_stored_keys(cancellable, error) else { return nil }
            defer { aa_secret_strings_free(strings) }
            var keys = Set<SecretKey>()
            var index = 0
            while let account = strings[index], let issuer = strings[index + 1], let clientID = strings[index + 2] {
                keys.insert(SecretKey(account: String(cString: account), issuer: String(cString: issuer),
                                      clientID: String(cString: clientID)))
                index += 3
            }
            return keys
        }
        if let failure = outcome.failure { throw authError(failure) }
        guard let keys = outcome.value ?? nil else { throw AuthError(.keyringError, "the keyring search failed") }
        return keys
    }

    public func store(_ item: KeyringItem, for key: SecretKey) async throws(AuthError) {
        let itemLabel = label(key)
        let validUntil = LibsecretStore.attribute(item.validUntil), warnedAt = LibsecretStore.attribute(item.warnedAt)
        let outcome = await caller.call { cancellable, error -> Guarded<Bool> in
            // Refused before anything is asked of the service: a locked store, or KeePassXC with no database open,
            // would otherwise wait on KeePassXC's unlock dialog or new-database wizard. (The GNOME keyring with no
            // login collection yet creates one, which is what a first write there should do.)
            let found = LibsecretStore.inspect(cancellable, error)
            switch found.state {
            case .locked: return .refused(found)
            case .available: break
            default: return .done(false)  // no service, or no answer: *error says which
            }
            let stored = LibsecretStore.withAttributes(key) { account, issuer, clientID in
                itemLabel.withCString { itemLabel in
                    LibsecretStore.withOptionalCString(validUntil) { validUntil in
                        LibsecretStore.withOptionalCString(warnedAt) { warnedAt in
                            item.secret.reveal().withCString { value in
                                aa_secret_store(account, issuer, clientID, itemLabel, value, validUntil, warnedAt,
                                                cancellable, error) == 1
                            }
                        }
                    }
                }
            }
            return .done(stored)
        }
        if let failure = outcome.failure { throw authError(failure) }
        switch outcome.value {
        case .done(true)?: return
        case .refused(let found)?: throw found.lockedError
        // libsecret documents FALSE with an error; be safe if it ever returns FALSE without one.
        case .done(false)?, nil: throw AuthError(.keyringError, "the keyring refused to store the token")
        }
    }

    /// What a write or delete came to.
    private enum Guarded<Value: Sendable>: Sendable {
        case done(Value)
        /// Not tried: the store hides its items (locked, or KeePassXC with no database open).
        case refused(Inspection)
    }

    /// `body` with the key's three attributes (the schema's `account`, `issuer` and `client_id`) as C strings.
    private static func withAttributes<T>(_ key: SecretKey,
                                          _ body: (UnsafePointer<CChar>, UnsafePointer<CChar>, UnsafePointer<CChar>) -> T) -> T {
        key.account.withCString { account in
            key.issuer.withCString { issuer in key.clientID.withCString { clientID in body(account, issuer, clientID) } }
        }
    }

    private static func withOptionalCString<T>(_ text: String?, _ body: (UnsafePointer<CChar>?) -> T) -> T {
        guard let text else { return body(nil) }
        return text.withCString { body($0) }
    }

    @discardableResult
    public func delete(_ key: SecretKey) async throws(AuthError) -> Bool {
        let outcome = await caller.call { cancellable, error -> Guarded<Bool> in
            // As for a write: a locked store hides the item (a delete would find nothing and say so), and KeePassXC
            // would wait on its unlock dialog.
            let found = LibsecretStore.inspect(cancellable, error)
            if found.hidesItems { return .refused(found) }
            guard found.raw == AA_KEYRING_AVAILABLE || found.raw == AA_KEYRING_NO_DEFAULT_COLLECTION else {
                return .done(false)  // *error says why
            }
            return .done(LibsecretStore.withAttributes(key) { account, issuer, clientID in
                aa_secret_clear(account, issuer, clientID, cancellable, error) == 1
            })
        }
        if let failure = outcome.failure { throw authError(failure) }
        switch outcome.value {
        case .done(let deleted)?: return deleted
        case .refused(let found)?: throw found.lockedError
        case nil: return false
        }
    }

    /// The default collection's state.
    ///
    /// - `available`: unlocked, or the GNOME keyring (any service but KeePassXC) answers but has no default
    ///   collection yet (no login keyring): nothing is hidden, so a nil ``loadItem(_:)`` really means "no token"; the
    ///   first ``store(_:for:)`` asks the keyring to create the collection (a prompt on a desktop; a `keyringError`
    ///   when headless).
    /// - `locked`: items are hidden and writes are refused until the user unlocks it; also KeePassXC with no
    ///   database open (no default collection), which hides the items the same way and would answer a write with
    ///   its new-database wizard.
    /// - `absent`: no Secret Service on the session bus (or no session bus).
    /// - `error`: anything else, including a keyring that did not answer within `timeout`.
    public func state() async -> KeyringState {
        let outcome = await caller.call { cancellable, error in LibsecretStore.inspect(cancellable, error) }
        if let found = outcome.value, found.raw != AA_KEYRING_ERROR { return found.state }
        switch outcome.failure?.kind {
        case .noService: return .absent
        case .locked: return .locked
        default: return .error
        }
    }

    /// The program that owns `org.freedesktop.secrets`; nil when none does or its process cannot be seen. Only the
    /// bus is asked, so this never starts a D-Bus-activatable service.
    public func service() async -> KeyringService? {
        await caller.call { cancellable, _ in LibsecretStore.program(cancellable) }.value ?? nil
    }

    public func lockedError() async -> AuthError {
        let outcome = await caller.call { cancellable, error in LibsecretStore.inspect(cancellable, error) }
        return outcome.value?.lockedError ?? AuthError.keyringLocked()
    }

    /// The Secret Service's arrival, owner changes and property changes (an unlock), heard by the shim on the session
    /// bus connection libsecret uses (`aa_secret_watch`). One listener per process: a later call replaces the
    /// earlier one's stream. With no session bus yet, the first state check that finds one starts hearing.
    public func changes() -> AsyncStream<Void> {
        let (stream, continuation) = AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(1))
        // Kept for the life of the process: the shim may tell it of a change at any time, on GDBus's thread.
        let sink = ChangeSink(continuation)
        Task {
            _ = await self.caller.call { cancellable, error in
                aa_secret_watch(LibsecretStore.changed, Unmanaged.passRetained(sink).toOpaque(), cancellable, error)
            }
        }
        return stream
    }

    private final class ChangeSink: Sendable {
        let continuation: AsyncStream<Void>.Continuation
        init(_ continuation: AsyncStream<Void>.Continuation) { self.continuation = continuation }
    }

    private static let changed: aa_secret_changed_fn = { context in
        guard let context else { return }
        Unmanaged<ChangeSink>.fromOpaque(context).takeUnretainedValue().continuation.yield()
    }

    /// The default collection's state as the shim reads it, and, when the store is not simply available, who
    /// answers: that decides what a missing default collection means and how a lock is worded.
    struct Inspection: Sendable {
        var raw: Int
        var service: KeyringService?

        var state: KeyringState {
            switch raw {
            case AA_KEYRING_AVAILABLE: return .available
            case AA_KEYRING_NO_DEFAULT_COLLECTION: return service.map(LibsecretStore.isKeePassXC) == true ? .locked : .available
            case AA_KEYRING_LOCKED: return .locked
            case AA_KEYRING_ABSENT: return .absent
            default: return .error
            }
        }

        /// Our items cannot be seen or written until the user acts.
        var hidesItems: Bool { state == .locked }

        /// In KeePassXC's words when it answers: its database is locked, or (no default collection) it has no
        /// database open for the Secret Service, which hides the items just as a lock does (SECURITY.md 19).
        var lockedError: AuthError {
            guard let service, LibsecretStore.isKeePassXC(service) else { return AuthError.keyringLocked(service) }
            return AuthError.keyringLocked(service, raw == AA_KEYRING_NO_DEFAULT_COLLECTION
                ? "KeePassXC answers as the Secret Service but has no database open for it: open your database in "
                    + "KeePassXC (one with a group exposed under Database Settings > Secret Service Integration) and try again"
                : "the KeePassXC database is locked: unlock the database in KeePassXC and try again")
        }
    }

    /// KeePassXC: the secrets are in the group of its open database that is exposed to the Secret Service; a locked
    /// database hides them, and with no database open there is no collection at all (no `default` alias), where
    /// the GNOME keyring would create its login collection on the first write. Known by its executable, or its
    /// process name, starting with "keepassxc".
    static func isKeePassXC(_ service: KeyringService) -> Bool {
        let name = service.program.split(separator: "/").last.map(String.init) ?? service.program
        return name.lowercased().hasPrefix("keepassxc")
    }

    /// The Secret Service that runs `program`, with how to unlock it in its words: KeePassXC's, or the GNOME keyring's
    /// (also for any other program).
    static func secretService(program: String) -> KeyringService {
        let gnome = KeyringService(program: program, unlock: "unlock the login keyring (log in again, or Seahorse); no restart needed")
        guard isKeePassXC(gnome) else { return gnome }
        return KeyringService(program: program, unlock: "unlock the database in KeePassXC, or open it if none is open; no restart needed")
    }

    /// Runs on the libsecret queue: the state, and the program when the state needs it. `error` is set only by the
    /// state's own failure.
    static func inspect(_ cancellable: UnsafeMutablePointer<GCancellable>?,
                        _ error: UnsafeMutablePointer<UnsafeMutablePointer<GError>?>) -> Inspection {
        let raw = Int(aa_secret_keyring_state(cancellable, error))
        guard raw == AA_KEYRING_LOCKED || raw == AA_KEYRING_NO_DEFAULT_COLLECTION else { return Inspection(raw: raw) }
        return Inspection(raw: raw, service: program(cancellable))
    }

    /// Runs on the libsecret queue; any failure (no owner, no bus) is "unknown".
    private static func program(_ cancellable: UnsafeMutablePointer<GCancellable>?) -> KeyringService? {
        var failure: UnsafeMutablePointer<GError>?
        defer { aa_secret_error_free(failure) }
        guard let program = aa_secret_service_program(cancellable, &failure) else { return nil }
        defer { aa_secret_string_free(program) }
        return secretService(program: String(cString: program))
    }

    private func authError(_ failure: LibsecretFailure) -> AuthError {
        switch failure.kind {
        case .locked:
            // A lock that showed up only as the service's error (between our check and the call).
            return AuthError.keyringLocked()
        case .noService:
            return AuthError.keyringUnavailable(failure.message)
        case .cancelled where failure.deadlinePassed:
            return AuthError(
                .keyringError,
                "the keyring did not answer within \(timeout.secondsText) s (is an unlock prompt waiting?)")
        case .timedOut:
            // D-Bus's own call timeout (25 s), which only fires first when `timeout` is longer.
            return AuthError(.keyringError, "the keyring did not answer in time (is an unlock prompt waiting?)")
        case .cancelled:
            return AuthError(.keyringError, "the keyring call was cancelled")
        case .other:
            return AuthError(.keyringError, "keyring error: \(failure.message)")
        }
    }
}
