import AuthCore
import CLibsecret
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// A ``SecretStore`` over libsecret: refresh tokens live in the Secret Service's default collection (the GNOME
/// login keyring), one item per ``SecretKey`` under the schema `dev.auth-agent.RefreshToken` with the attributes
/// `account`, `issuer` and `client_id`, and, when known, `valid_until` and `warned_at` (``KeyringItem``'s dates, as
/// decimal Unix seconds: not secret, so never in the secret, which is the bare credential).
///
/// Every call runs off the Swift concurrency pool on one serial queue and gives up after `timeout` (a stopped
/// daemon, or an unlock prompt nobody answers, would otherwise block for ~50 s). Errors map to
/// `keyringLocked`, `keyringUnavailable` (no Secret Service on the bus) and `keyringError`; no message ever
/// contains a secret.
///
/// A locked collection hides its items: ``load(_:)`` then returns nil without an error, so callers that get nil
/// ask ``state()`` before concluding that there is no token.
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
            LibsecretStore.withAttributes(key) { account, issuer, clientID in
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
        let outcome = await caller.call { cancellable, error -> Bool in
            LibsecretStore.withAttributes(key) { account, issuer, clientID in
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
        }
        if let failure = outcome.failure { throw authError(failure) }
        // libsecret documents FALSE with an error; be safe if it ever returns FALSE without one.
        guard outcome.value == true else { throw AuthError(.keyringError, "the keyring refused to store the token") }
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
        let outcome = await caller.call { cancellable, error -> Bool in
            LibsecretStore.withAttributes(key) { account, issuer, clientID in
                aa_secret_clear(account, issuer, clientID, cancellable, error) == 1
            }
        }
        if let failure = outcome.failure { throw authError(failure) }
        return outcome.value ?? false
    }

    /// The default collection's state.
    ///
    /// - `available`: unlocked, or the service answers but has no default collection yet (no login keyring):
    ///   nothing is hidden, so a nil ``load(_:)`` really means "no token"; the first ``store(_:for:)`` asks the
    ///   keyring to create the collection (a prompt on a desktop; a `keyringError` when headless).
    /// - `locked`: items are hidden and stores fail until the user unlocks it.
    /// - `absent`: no Secret Service on the session bus (or no session bus).
    /// - `error`: anything else, including a keyring that did not answer within `timeout`.
    public func state() async -> KeyringState {
        let outcome = await caller.call { cancellable, error in Int(aa_secret_keyring_state(cancellable, error)) }
        switch outcome.value ?? AA_KEYRING_ERROR {
        case AA_KEYRING_AVAILABLE, AA_KEYRING_NO_DEFAULT_COLLECTION: return .available
        case AA_KEYRING_LOCKED: return .locked
        case AA_KEYRING_ABSENT: return .absent
        default:
            switch outcome.failure?.kind {
            case .noService: return .absent
            case .locked: return .locked
            default: return .error
            }
        }
    }

    private func authError(_ failure: LibsecretFailure) -> AuthError {
        switch failure.kind {
        case .locked:
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
