import Logging

/// Sign-ins kept in memory only (``StoreChoice/auto`` with no Secret Service on the bus): the idle exit asks whether
/// there are any (it would lose them), and a Secret Service that appears (or unlocks) later gets them.
extension TokenBroker {
    /// Whether any sign-in lives in the agent's memory only.
    public var holdsSignInsInMemory: Bool {
        get async { await keyring.holdsItems }
    }

    /// Names of the accounts whose sign-in lives in memory only, in configuration order.
    public var accountsInMemory: [String] {
        get async {
            let held = await keyring.heldKeys
            return accountOrder.filter { name in accounts[name].map { held.contains(SecretKey($0.config)) } ?? false }
        }
    }

    /// A Secret Service appeared on the session bus, or one said its collections changed (unlocked): moves every
    /// sign-in held in memory into it, once each. One the keyring refuses stays in memory, and `status` shows why.
    public func secretServiceAppeared() async {
        guard await keyring.holdsItems else { return }
        if await !moveHeldSignIns(warnOfRefusals: true) { retryMovesLater() }
    }

    /// One attempt to move every held sign-in into the keyring; each that moved is said in the journal and to the
    /// front ends (`accountChanged`), each refusal too with `warnOfRefusals` (the first attempt: a retry says nothing
    /// until it succeeds).
    /// Returns whether every one moved.
    private func moveHeldSignIns(warnOfRefusals: Bool) async -> Bool {
        var allMoved = true
        for (key, error) in await keyring.moveHeldItems() {
            if let error {
                allMoved = false
                guard warnOfRefusals else { continue }
                logger.warning("a Secret Service answers, but the sign-in could not be moved into it; it stays in memory",
                               metadata: ["account": "\(key.account)", "error_code": "\(error.code.rawValue)"])
            } else {
                logger.notice("the sign-in kept in memory is now in the keyring", metadata: ["account": "\(key.account)"])
            }
            publish(.accountChanged(key.account))
        }
        return allMoved
    }

    /// How often a refused move is tried again. gnome-keyring sends no signal when it is unlocked through its
    /// control socket (as PAM does at login), so a locked keyring that takes a held sign-in is found by asking.
    static let moveRetryInterval: Duration = .seconds(10)

    /// Tries the refused moves again every ``moveRetryInterval`` until nothing is held (one loop at a time).
    func retryMovesLater() {
        guard moveRetry == nil else { return }
        let time = self.time
        moveRetry = Task {
            while !Task.isCancelled {
                do { try await time.sleep(for: TokenBroker.moveRetryInterval) } catch { break }
                guard await self.keyring.holdsItems, await !self.moveHeldSignIns(warnOfRefusals: false) else { break }
            }
            await self.moveRetryEnded()
        }
    }

    private func moveRetryEnded() { moveRetry = nil }
}
