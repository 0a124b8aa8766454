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
        for (key, error) in await keyring.moveHeldItems() {
            if let error {
                logger.warning("a Secret Service answers, but the sign-in could not be moved into it; it stays in memory",
                               metadata: ["account": "\(key.account)", "error_code": "\(error.code.rawValue)"])
            } else {
                logger.notice("the sign-in kept in memory is now in the keyring", metadata: ["account": "\(key.account)"])
            }
            publish(.accountChanged(key.account))
        }
    }
}
