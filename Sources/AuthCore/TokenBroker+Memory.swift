import Logging

/// Sign-ins kept in memory only (``CredentialStore``): the idle exit asks whether there are any (it would lose them),
/// and a Secret Service that appears (or unlocks) later gets them.
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

    /// Runs until cancelled: each time the Secret Service appears or changes (an unlock), as the keyring adapter
    /// hears it, the sign-ins held in memory move into it (``CredentialStore/followChanges()``).
    public func followSecretService() async {
        await keyring.followChanges()
    }
}
