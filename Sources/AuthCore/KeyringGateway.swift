/// The broker's one way to the keyring (``SecretStore``): reads that tell "not signed in" from "keyring locked",
/// writes, and the bounded probe `status` shows. It owns the rules that are about the keyring and not about tokens:
/// a lookup that finds nothing is double-checked against the keyring's state (a locked collection hides its items
/// without an error, SECURITY.md 19); every probe step is bounded, so a keyring that hangs (an unanswered unlock
/// prompt, a stopped daemon) shows as `error`; concurrent `status` calls share one probe, and every write retires a
/// probe that began before it, so a `status` asked after a write never gets an answer read before it.
actor KeyringGateway {
    /// What `status` reports about the keyring: its state and, when it is available, which keys have a token
    /// (nil when the search failed or took too long).
    struct View: Sendable {
        var state: KeyringState
        var stored: Set<SecretKey>?
        /// Who answers as the Secret Service (nil: none, or unknown).
        var service: KeyringService?
    }

    private let store: any SecretStore
    private let time: any TimeSource
    private let probeLimit: Duration
    private var probe: Task<View, Never>?

    init(store: any SecretStore, time: any TimeSource, probeLimit: Duration) {
        self.store = store
        self.time = time
        self.probeLimit = probeLimit
    }

    /// The item stored under `key`, or nil when there truly is none; a locked or absent keyring throws.
    func load(_ key: SecretKey) async throws(AuthError) -> KeyringItem? {
        if let found = try await store.loadItem(key) { return found }
        switch await store.state() {
        case .locked: throw await store.lockedError()
        case .absent: throw AuthError.keyringUnavailable("the Secret Service is not running")
        case .available, .error: return nil
        }
    }

    /// Throws `keyringLocked` (in the words of the Secret Service that answers) when the store is locked: asked
    /// before a sign-in sends anyone to the browser, whose result would otherwise have nowhere to go. Any other
    /// state lets the sign-in go on (a keyring that does not answer now may by the end of it).
    func requireUnlocked() async throws(AuthError) {
        guard await state() == .locked else { return }
        throw await store.lockedError()
    }

    /// The item under `key` as the keyring gives it, without the double check: nil also when the collection is
    /// locked (for readers that only act on an item they see: the sign-in lifetime watch, forgetting a dead token).
    func item(_ key: SecretKey) async throws(AuthError) -> KeyringItem? {
        try await store.loadItem(key)
    }

    /// Which keys have an item, if the keyring is unlocked and answers (one search of the attributes, no secret read).
    func storedKeysIfAvailable() async -> Set<SecretKey>? {
        guard await store.state() == .available else { return nil }
        return try? await store.storedKeys()
    }

    func store(_ item: KeyringItem, for key: SecretKey) async throws(AuthError) {
        defer { probe = nil }
        try await store.store(item, for: key)
    }

    @discardableResult
    func delete(_ key: SecretKey) async throws(AuthError) -> Bool {
        defer { probe = nil }
        return try await store.delete(key)
    }

    /// The keyring's state, bounded by the probe limit (`error` when it does not answer in time).
    func state() async -> KeyringState {
        let store = self.store
        return await time.within(probeLimit, fallback: .error) { await store.state() }
    }

    /// The probe under way if there is one, else a new one. Each step is bounded by the probe limit.
    func view() async -> View {
        if let running = probe { return await running.value }
        let store = self.store, time = self.time, limit = probeLimit
        let task = Task {
            let state = await time.within(limit, fallback: .error) { await store.state() }
            // Not asked of a keyring that did not answer: the call would queue behind the stuck one and double the
            // time `status` takes.
            let service = state == .error
                ? nil : await time.within(limit, fallback: KeyringService?.none) { await store.service() }
            guard state == .available else { return View(state: state, stored: nil, service: service) }
            let stored = await time.within(limit, fallback: nil) { () async -> Set<SecretKey>? in
                try? await store.storedKeys()
            }
            return View(state: state, stored: stored, service: service)
        }
        probe = task
        let view = await task.value
        if probe == task { probe = nil }
        return view
    }
}
