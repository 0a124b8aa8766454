/// Where sign-ins are kept (`[agent] store`).
public enum StoreChoice: String, Sendable, CaseIterable {
    /// The Secret Service when one answers on the session bus; when none does, the agent's memory, said plainly
    /// (``CredentialStore``). A locked keyring is never taken for a missing one.
    case auto
    /// The Secret Service only: without one, a sign-in fails with `keyring_unavailable`.
    case secretService = "secret-service"
    /// The agent's memory only: the Secret Service is never asked, and every sign-in ends when the agent stops.
    case memory
}

/// Where one write went (``CredentialStore/write(_:for:as:)``).
public enum StoredIn: Sendable, Equatable {
    case keyring
    /// Kept in the agent's memory; `first`: the key was not held there before this write.
    case memory(first: Bool)
    /// The keyring refused it (locked, failing): kept in memory, with the reason, until the keyring takes it.
    case held(AuthError)
}
