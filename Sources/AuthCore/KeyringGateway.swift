/// The broker's one way to the keyring (``SecretStore``): reads that tell "not signed in" from "keyring locked",
/// writes, and the bounded probe `status` shows. It owns the rules that are about the keyring and not about tokens:
/// a lookup that finds nothing is double-checked against the keyring's state (a locked collection hides its items
/// without an error, SECURITY.md 19); every probe step is bounded, so a keyring that hangs (an unanswered unlock
/// prompt, a stopped daemon) shows as `error`; concurrent `status` calls share one probe, and every write retires a
/// probe that began before it, so a `status` asked after a write never gets an answer read before it.
///
/// It also owns where a sign-in goes when there is no Secret Service (``StoreChoice``): with `auto`, a write that
/// finds no Secret Service on the bus keeps the item in memory (never a file); a held item is the newest of its key,
/// read before the keyring's, written there by ``moveHeldItems()`` once a Secret Service answers. A locked or failing
/// keyring is never taken for a missing one.
actor KeyringGateway {
    /// What `status` reports about the keyring: its state and, when it is available, which keys have a token
    /// (nil when the search failed or took too long), and which sign-ins live in memory only.
    struct View: Sendable {
        var state: KeyringState
        var stored: Set<SecretKey>?
        /// Who answers as the Secret Service (nil: none, or unknown).
        var service: KeyringService?
        var held: [SecretKey: HeldItem] = [:]
    }

    /// A sign-in kept in memory: why the last move to the keyring failed, if one was tried.
    struct HeldItem: Sendable, Equatable {
        var moveError: String?
    }

    private let store: any SecretStore
    let choice: StoreChoice
    private let time: any TimeSource
    private let probeLimit: Duration
    private var probe: Task<View, Never>?
    /// Items kept in memory only (``StoreChoice``), and why each could not be moved to the keyring.
    private var held: [SecretKey: KeyringItem] = [:]
    private var moveErrors: [SecretKey: String] = [:]

    init(store: any SecretStore, choice: StoreChoice = .secretService, time: any TimeSource, probeLimit: Duration) {
        self.store = store
        self.choice = choice
        self.time = time
        self.probeLimit = probeLimit
    }

    /// The item stored under `key`, or nil when there truly is none; a locked keyring throws, and so does an absent
    /// one unless sign-ins may live in memory.
    func load(_ key: SecretKey) async throws(AuthError) -> KeyringItem? {
        if let item = held[key] { return item }
        guard choice != .memory else { return nil }
        do throws(AuthError) {
            if let found = try await store.loadItem(key) { return found }
        } catch where keptInMemoryWhen(error) {
            return nil
        }
        switch await store.state() {
        case .locked: throw await store.lockedError()
        case .absent where choice == .auto: return nil
        case .absent: throw AuthError.keyringUnavailable("the Secret Service is not running")
        case .available, .error, .unused: return nil
        }
    }

    /// Throws `keyringLocked` (in the words of the Secret Service that answers) when the store is locked: asked
    /// before a sign-in sends anyone to the browser, whose result would otherwise have nowhere to go (a locked store
    /// is never a reason to keep a sign-in in memory). Any other state lets the sign-in go on (a keyring that does
    /// not answer now may by the end of it; with no Secret Service and `auto`, the sign-in is kept in memory).
    func requireUnlocked() async throws(AuthError) {
        guard choice != .memory, await state() == .locked else { return }
        throw await store.lockedError()
    }

    /// The item under `key` as the keyring gives it, without the double check: nil also when the collection is
    /// locked (for readers that only act on an item they see: the sign-in lifetime watch, forgetting a dead token).
    func item(_ key: SecretKey) async throws(AuthError) -> KeyringItem? {
        if let item = held[key] { return item }
        guard choice != .memory else { return nil }
        do throws(AuthError) {
            return try await store.loadItem(key)
        } catch where keptInMemoryWhen(error) {
            return nil
        }
    }

    /// Which keys have an item, if the keyring is unlocked and answers (one search of the attributes, no secret
    /// read), or none answers and sign-ins live in memory.
    func storedKeysIfAvailable() async -> Set<SecretKey>? {
        let state = choice == .memory ? KeyringState.unused : await store.state()
        let stored = state == .available ? try? await store.storedKeys() : nil
        return withHeld(stored, state: state)
    }

    /// The keys with an item, given what the keyring said (`stored`, when it was asked) and its state: the held
    /// ones too, and only those when no keyring is used or none answers under `auto`; nil when it cannot be known.
    private func withHeld(_ stored: Set<SecretKey>?, state: KeyringState) -> Set<SecretKey>? {
        let inMemory = Set(held.keys)
        switch state {
        case .available: return stored?.union(inMemory)
        case .unused: return inMemory
        case .absent where choice == .auto: return inMemory
        case .absent, .locked, .error: return nil
        }
    }

    /// With `auto`, no Secret Service on the bus means the sign-in lives (or would live) in memory; any other
    /// failure, a locked keyring among them, is the caller's error.
    private func keptInMemoryWhen(_ error: AuthError) -> Bool {
        error.code == .keyringUnavailable && choice == .auto
    }

    /// Keeps `item` in memory (``StoredIn/memory(first:)``: whether the key was not held before).
    private func hold(_ item: KeyringItem, for key: SecretKey) -> StoredIn {
        .memory(first: held.updateValue(item, forKey: key) == nil)
    }

    /// Writes the item: to the keyring, or, with no Secret Service and `auto` (or with `memory`), to memory. A key
    /// held in memory stays there until ``moveHeldItems()`` writes it to the keyring. `holdIfLocked` (a finished
    /// sign-in, which must not be lost): a keyring that locked since the sign-in began gets the item when it is
    /// unlocked, and the error is kept as the reason meanwhile (this is not a fallback: the item goes to that keyring).
    @discardableResult
    func store(_ item: KeyringItem, for key: SecretKey, holdIfLocked: Bool = false) async throws(AuthError) -> StoredIn {
        defer { probe = nil }
        if held[key] != nil || choice == .memory { return hold(item, for: key) }
        do throws(AuthError) {
            try await store.store(item, for: key)
            return .keyring
        } catch where keptInMemoryWhen(error) {
            return hold(item, for: key)
        } catch where error.code == .keyringLocked && holdIfLocked {
            held[key] = item
            moveErrors[key] = error.message
            return .untilUnlocked
        }
    }

    @discardableResult
    func delete(_ key: SecretKey) async throws(AuthError) -> Bool {
        defer { probe = nil }
        let wasHeld = held.removeValue(forKey: key) != nil
        moveErrors[key] = nil
        guard choice != .memory else { return wasHeld }
        do throws(AuthError) {
            return try await store.delete(key) || wasHeld
        } catch where keptInMemoryWhen(error) {
            return wasHeld
        }
    }

    /// Whether any sign-in lives in memory only (the agent must then not exit idle: it would lose it).
    var holdsItems: Bool { !held.isEmpty }
    var heldKeys: Set<SecretKey> { Set(held.keys) }

    /// Writes every item held in memory to the keyring (a Secret Service appeared, or was unlocked). An item
    /// written is dropped from memory; one the keyring refused stays, with the reason. A key written again while
    /// its move was under way is moved again, so the newest item is the one that lands. Returns what happened per
    /// key (nil: moved).
    func moveHeldItems() async -> [(key: SecretKey, error: AuthError?)] {
        guard choice != .memory else { return [] }
        var report: [(key: SecretKey, error: AuthError?)] = []
        for key in held.keys.sorted(by: { $0.account < $1.account }) {
            while let item = held[key] {
                do throws(AuthError) {
                    try await store.store(item, for: key)
                } catch {
                    moveErrors[key] = error.message
                    report.append((key, error))
                    break
                }
                probe = nil
                // Dropped only if nothing newer was held meanwhile (a refresh that rotated the token).
                guard held[key] == item else { continue }
                held[key] = nil
                moveErrors[key] = nil
                report.append((key, nil))
            }
        }
        return report
    }

    /// The keyring's state, bounded by the probe limit (`error` when it does not answer in time).
    func state() async -> KeyringState {
        guard choice != .memory else { return .unused }
        let store = self.store
        return await time.within(probeLimit, fallback: .error) { await store.state() }
    }

    /// The probe under way if there is one, else a new one. Each step is bounded by the probe limit.
    func view() async -> View {
        var view = await probedView()
        view.held = held.keys.reduce(into: [:]) { $0[$1] = HeldItem(moveError: moveErrors[$1]) }
        view.stored = withHeld(view.stored, state: view.state)
        return view
    }

    private func probedView() async -> View {
        guard choice != .memory else { return View(state: .unused, stored: nil) }
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
