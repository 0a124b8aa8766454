import Logging

/// The one owner of where a credential is: in the keyring (``SecretStore``), or in the agent's memory, for one of
/// three reasons (no Secret Service with `store = "auto"`, `store = "memory"`, or a keyring that refused a write
/// which must not be lost: a finished sign-in while it is locked, a rotated refresh token), and the one rule that
/// moves what memory holds into the keyring: when the Secret Service appears or changes, and every
/// ``moveRetryInterval`` while anything is held. A held item is the newest of its key, read before the keyring's;
/// it counts as signed in, keeps the agent from its idle exit, and `status` shows why it is not in the keyring.
/// Every write goes through ``write(_:for:as:)``; what happens when the keyring refuses it is the write's kind
/// (``Write``), decided here. A locked or failing keyring is never taken for a missing one.
///
/// It also owns the rules that are about the keyring and not about tokens: a lookup that finds nothing is
/// double-checked against the keyring's state (a locked collection hides its items without an error, SECURITY.md
/// 19); every probe step is bounded, so a keyring that hangs (an unanswered unlock prompt, a stopped daemon) shows as
/// `error`; concurrent `status` calls share one probe, and every write retires a probe that began before it, so a
/// `status` asked after a write never gets an answer read before it.
actor CredentialStore {
    /// What `status` reports about the keyring: its state and, when it is available, which keys have a token
    /// (nil when the search failed or took too long), and which sign-ins live in memory only.
    struct View: Sendable {
        var state: KeyringState
        var stored: Set<SecretKey>?
        /// Who answers as the Secret Service (nil: none, or unknown).
        var service: KeyringService?
        var held: [SecretKey: HeldItem] = [:]
    }

    /// An item kept in memory: why the keyring has not taken it, if it was asked.
    struct HeldItem: Sendable, Equatable {
        var moveError: String?
    }

    /// What a write is, which decides what a refusal by the keyring does.
    enum Write {
        /// A finished sign-in: a keyring that locked since it began gets it when it is unlocked (held meanwhile).
        case signIn
        /// A rotated refresh token: the server has already replaced the one stored, so any refusal holds it.
        case rotation
        /// The same credential written again (its dates, a warning, the ID token's claims): a refusal is the
        /// caller's error, and the keyring keeps the item it had.
        case rewrite
    }

    private let store: any SecretStore
    let choice: StoreChoice
    private let time: any TimeSource
    private let probeLimit: Duration
    private let logger: Logger
    private let events: BrokerEventHub
    private var probe: Task<View, Never>?
    /// Items kept in memory only, and why each is not in the keyring (nil: no Secret Service, or `memory`).
    private var held: [SecretKey: KeyringItem] = [:]
    private var moveErrors: [SecretKey: String] = [:]
    /// Moves held items every ``moveRetryInterval`` while the keyring refuses them (one loop at a time).
    private var moveRetry: Task<Void, Never>?

    /// How often a refused move is tried again. gnome-keyring sends no signal when it is unlocked through its
    /// control socket (as PAM does at login), so a locked keyring that takes a held item is found by asking.
    static let moveRetryInterval: Duration = .seconds(10)

    init(store: any SecretStore, choice: StoreChoice = .secretService, time: any TimeSource, probeLimit: Duration,
         logger: Logger = Logger(label: "auth-agent.credentials"), events: BrokerEventHub = BrokerEventHub()) {
        self.store = store
        self.choice = choice
        self.time = time
        self.probeLimit = probeLimit
        self.logger = logger
        self.events = events
    }

    /// The item stored under `key`, or nil when there truly is none; a locked keyring throws, and so does an absent
    /// one unless sign-ins may live in memory.
    func load(_ key: SecretKey) async throws(AuthError) -> KeyringItem? {
        if let found = try await item(key) { return found }
        guard choice != .memory else { return nil }
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

    /// Writes the item: to the keyring, or, with no Secret Service and `auto` (or with `memory`), to memory, where it
    /// stays until a move writes it to the keyring. A refusal by the keyring holds the item with its reason when the
    /// write is one that must not be lost (``Write``; this is not a fallback: the item goes to that keyring), and is
    /// the caller's error otherwise. A key held for a refusal is tried again by every write of it, as by a move.
    @discardableResult
    func write(_ item: KeyringItem, for key: SecretKey, as kind: Write = .rewrite) async throws(AuthError) -> StoredIn {
        defer { probe = nil }
        let wasHeld = held[key] != nil
        if choice == .memory || (wasHeld && moveErrors[key] == nil) { return hold(item, for: key) }
        do throws(AuthError) {
            try await store.store(item, for: key)
            held[key] = nil
            moveErrors[key] = nil
            return .keyring
        } catch where keptInMemoryWhen(error) {
            return hold(item, for: key)
        } catch where wasHeld || kind == .rotation || (kind == .signIn && error.code == .keyringLocked) {
            held[key] = item
            moveErrors[key] = error.message
            if !wasHeld {
                logger.notice(kind == .signIn
                                ? "the keyring locked during the sign-in; the sign-in is kept in memory and written when it is unlocked"
                                : "the keyring refused the rotated refresh token; it is kept in memory and written when the keyring takes it",
                              metadata: ["account": "\(key.account)", "error_code": "\(error.code.rawValue)"])
            }
            retryMovesLater()
            return .held(error)
        }
    }

    /// Keeps `item` in memory (``StoredIn/memory(first:)``: whether the key was not held before); a key that starts
    /// to live in memory only is said once in the journal.
    private func hold(_ item: KeyringItem, for key: SecretKey) -> StoredIn {
        let first = held.updateValue(item, forKey: key) == nil
        if first {
            logger.notice(choice == .memory
                            ? "the sign-in is kept in memory until the agent stops (store = \"memory\")"
                            : "no Secret Service answers; the sign-in is kept in memory until the agent stops",
                          metadata: ["account": "\(key.account)"])
        }
        return .memory(first: first)
    }

    /// Deletes the item, held or stored; with `ifStill`, only while the credential there is still that one.
    @discardableResult
    func delete(_ key: SecretKey, ifStill expected: Secret? = nil) async throws(AuthError) -> Bool {
        if let expected, try await item(key)?.secret != expected { return false }
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

    /// Whether any item lives in memory only (the agent must then not exit idle: it would lose it).
    var holdsItems: Bool { !held.isEmpty }
    var heldKeys: Set<SecretKey> { Set(held.keys) }

    /// Moves the held items at each change of the Secret Service, as its adapter hears it (it appeared, changed
    /// owner, or said a collection changed: an unlock), until cancelled. One the keyring refuses stays in memory,
    /// and `status` shows why; the moves are then tried again every ``moveRetryInterval``.
    func followChanges() async {
        guard choice != .memory else { return }
        for await _ in store.changes() where !held.isEmpty {
            if await !moveAndSay(warnOfRefusals: true) { retryMovesLater() }
        }
    }

    /// One attempt to move every held item; each that moved is said in the journal and to the front ends
    /// (`accountChanged`), each refusal too with `warnOfRefusals` (a retry says nothing until it succeeds).
    /// Returns whether every one moved.
    private func moveAndSay(warnOfRefusals: Bool) async -> Bool {
        var allMoved = true
        for (key, error) in await moveHeldItems() {
            if let error {
                allMoved = false
                guard warnOfRefusals else { continue }
                logger.warning("a Secret Service answers, but the sign-in could not be moved into it; it stays in memory",
                               metadata: ["account": "\(key.account)", "error_code": "\(error.code.rawValue)"])
            } else {
                logger.notice("the sign-in kept in memory is now in the keyring", metadata: ["account": "\(key.account)"])
            }
            events.publish(.accountChanged(key.account))
        }
        return allMoved
    }

    /// Writes every item held in memory to the keyring. An item written is dropped from memory; one the keyring
    /// refused stays, with the reason. A key written again while its move was under way is moved again, so the
    /// newest item is the one that lands. Returns what happened per key (nil: moved).
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

    /// Tries the refused moves again every ``moveRetryInterval`` until nothing is held.
    private func retryMovesLater() {
        guard moveRetry == nil else { return }
        let time = self.time
        moveRetry = Task {
            while !Task.isCancelled {
                do { try await time.sleep(for: CredentialStore.moveRetryInterval) } catch { break }
                guard await self.holdsItems, await !self.moveAndSay(warnOfRefusals: false) else { break }
            }
            await self.moveRetryEnded()
        }
    }

    private func moveRetryEnded() { moveRetry = nil }

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
