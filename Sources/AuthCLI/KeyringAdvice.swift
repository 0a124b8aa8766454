/// What a keyring that is not available means and what to do about it, in the words of the Secret Service that
/// answers (the agent names its program: `keyring_service` in errors, `status` and `diagnose`). One wording for
/// `authctl`'s error hints, `status` and `doctor`.
public enum KeyringAdvice {
    /// KeePassXC answers as the Secret Service (its executable, or process name, starts with "keepassxc").
    public static func isKeePassXC(_ service: String?) -> Bool {
        guard let service else { return false }
        let name = service.split(separator: "/").last.map(String.init) ?? service
        return name.lowercased().hasPrefix("keepassxc")
    }

    /// "KeePassXC (/usr/bin/keepassxc)", "/usr/bin/gnome-keyring-daemon", or a neutral phrase when unknown.
    public static func describe(_ service: String?) -> String {
        guard let service else { return "the Secret Service" }
        return isKeePassXC(service) ? "KeePassXC (\(service))" : service
    }

    /// What to do about a keyring in `state` (available, locked, absent, error, unused); nil for `available`.
    /// `store`: the agent's `[agent] store`, which decides what no Secret Service means.
    public static func hint(state: String, service: String?, store: String? = nil) -> String? {
        switch state {
        case "absent" where store == "auto":
            return "no Secret Service on the session bus: sign-ins are kept in memory until the agent stops; start one (gnome-keyring-daemon, KeePassXC) and they move into it"
        case "absent" where store == "secret-service":
            return "start gnome-keyring-daemon (or another Secret Service, such as KeePassXC) in your session, or set `store = \"auto\"` in [agent] to keep sign-ins in memory meanwhile"
        case "unused":
            return "store = \"memory\": sign-ins are kept in memory until the agent stops; set `store = \"auto\"` in [agent] to keep them in a Secret Service"
        case "locked":
            if isKeePassXC(service) {
                return "unlock the database in KeePassXC, or open it if none is open; no restart needed"
            }
            return "unlock the login keyring (log in again, or Seahorse); no restart needed"
        case "absent":
            return "no Secret Service on the session bus: start one (gnome-keyring-daemon, KeePassXC) and the agent uses it without a restart"
        case "error":
            return isKeePassXC(service)
                ? "KeePassXC did not answer in time: a dialog of its may be waiting; see the agent's log"
                : "the keyring failed or did not answer in time (an unlock prompt may be waiting); see the agent's log"
        default: return nil
        }
    }
}
