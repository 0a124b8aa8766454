import AuthCore

/// An in-memory ``SecretStore`` for unit tests of broker logic, mimicking libsecret's behaviour when the keyring is
/// locked or absent. Never used by the agent itself.
public actor MemorySecretStore: SecretStore {
    public private(set) var items: [SecretKey: Secret] = [:]
    public var forcedState: KeyringState = .available
    public private(set) var writes = 0
    /// How many times ``load(_:)`` and ``storedKeys()`` were asked.
    public private(set) var loads = 0
    public private(set) var searches = 0

    public init(items: [SecretKey: Secret] = [:]) { self.items = items }

    public func setState(_ state: KeyringState) { forcedState = state }

    /// Like libsecret: a locked collection hides its items, so a lookup returns nothing rather than failing.
    public func load(_ key: SecretKey) throws(AuthError) -> Secret? {
        loads += 1
        if forcedState == .locked { return nil }
        try check()
        return items[key]
    }
    public func storedKeys() throws(AuthError) -> Set<SecretKey> {
        searches += 1
        if forcedState == .locked { return [] }
        try check()
        return Set(items.keys)
    }
    public func store(_ secret: Secret, for key: SecretKey) throws(AuthError) {
        try check()
        items[key] = secret
        writes += 1
    }
    public func delete(_ key: SecretKey) throws(AuthError) -> Bool {
        if forcedState == .locked { return false }
        try check()
        return items.removeValue(forKey: key) != nil
    }
    public func state() -> KeyringState { forcedState }

    private func check() throws(AuthError) {
        switch forcedState {
        case .available: return
        case .locked: throw AuthError.keyringLocked()
        case .absent: throw AuthError.keyringUnavailable("test store is absent")
        case .error: throw AuthError(.keyringError, "test store failure")
        }
    }
}
