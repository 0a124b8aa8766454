import AuthCore

/// An in-memory ``SecretStore`` for unit tests of broker logic, mimicking libsecret's behaviour when the keyring is
/// locked or absent. Never used by the agent itself.
public actor MemorySecretStore: SecretStore {
    /// Each key's item, its secret and its dates, as the keyring would keep them.
    public private(set) var entries: [SecretKey: KeyringItem] = [:]
    /// Each key's secret alone.
    public var items: [SecretKey: Secret] { entries.mapValues(\.secret) }
    public var forcedState: KeyringState = .available
    public private(set) var writes = 0
    /// How many times ``loadItem(_:)`` and ``storedKeys()`` were asked.
    public private(set) var loads = 0
    public private(set) var searches = 0

    public init(items: [SecretKey: Secret] = [:]) { self.entries = items.mapValues { KeyringItem(secret: $0) } }
    public init(entries: [SecretKey: KeyringItem]) { self.entries = entries }

    public func setState(_ state: KeyringState) { forcedState = state }

    private nonisolated let changed = AsyncStream<Void>.makeStream()
    public nonisolated func changes() -> AsyncStream<Void> { changed.stream }
    /// The Secret Service appeared or changed (an unlock), as the keyring adapter would hear it.
    public nonisolated func announceChange() { changed.continuation.yield() }

    /// Like libsecret: a locked collection hides its items, so a lookup returns nothing rather than failing.
    public func loadItem(_ key: SecretKey) throws(AuthError) -> KeyringItem? {
        loads += 1
        if forcedState == .locked { return nil }
        try check()
        return entries[key]
    }
    public func storedKeys() throws(AuthError) -> Set<SecretKey> {
        searches += 1
        if forcedState == .locked { return [] }
        try check()
        return Set(entries.keys)
    }
    public func store(_ item: KeyringItem, for key: SecretKey) throws(AuthError) {
        try check()
        entries[key] = item
        writes += 1
    }
    public func delete(_ key: SecretKey) throws(AuthError) -> Bool {
        if forcedState == .locked { return false }
        try check()
        return entries.removeValue(forKey: key) != nil
    }
    public func state() -> KeyringState { forcedState }

    private func check() throws(AuthError) {
        switch forcedState {
        case .available, .unused: return
        case .locked: throw AuthError.keyringLocked()
        case .absent: throw AuthError.keyringUnavailable("test store is absent")
        case .error: throw AuthError(.keyringError, "test store failure")
        }
    }
}
