/// The program that answers as the Secret Service: the owner of `org.freedesktop.secrets` on the session bus, which
/// the bus decides (on Debian, the first call starts the D-Bus-activatable gnome-keyring unless another service
/// owns the name already), and what to tell the person about it in its own words. Which product it is (KeePassXC,
/// the GNOME keyring) is the keyring adapter's knowledge: it fills the words in; the domain and authctl pass them on.
public struct KeyringService: Sendable, Equatable {
    /// The path of its executable, or its process name when that cannot be read.
    public var program: String
    /// How to lift a lock that hides the sign-ins.
    public var unlock: String

    public init(program: String, unlock: String) { (self.program, self.unlock) = (program, unlock) }
}

public enum KeyringState: String, Sendable, Equatable {
    case available, locked, absent, error
    /// `[agent] store = "memory"`: the Secret Service is never asked.
    case unused

    /// What to do about the keyring in this state (nil when it is available), in the words of the Secret Service that
    /// answers for a lock (a silent one is not asked who it is), and of the `[agent] store` setting for a missing or
    /// unused one.
    public func advice(store: StoreChoice, service: KeyringService?) -> String? {
        switch (self, store) {
        case (.available, _): return nil
        case (.locked, _): return service?.unlock ?? "unlock the keyring that holds the sign-ins; no restart needed"
        case (.error, _):
            return "the keyring failed or did not answer in time (an unlock prompt may be waiting); see the agent's log"
        case (.unused, _), (_, .memory):
            return "store = \"memory\": sign-ins are kept in memory until the agent stops; set `store = \"auto\"` in [agent] to keep them in a Secret Service"
        case (.absent, .auto):
            return "no Secret Service on the session bus: sign-ins are kept in memory until the agent stops; start one (gnome-keyring-daemon, KeePassXC) and they move into it"
        case (.absent, .secretService):
            return "start gnome-keyring-daemon (or another Secret Service, such as KeePassXC) in your session, or set `store = \"auto\"` in [agent] to keep sign-ins in memory meanwhile"
        }
    }
}
