/// The program that answers as the Secret Service: the owner of `org.freedesktop.secrets` on the session bus, which
/// the bus decides (on Debian, the first call starts the D-Bus-activatable gnome-keyring unless another service
/// owns the name already). Named by `doctor` and `status`, and it picks the words of a "locked" error.
public struct KeyringService: Sendable, Equatable {
    /// The path of its executable, or its process name when that cannot be read.
    public var program: String

    public init(program: String) { self.program = program }

    /// KeePassXC: the secrets are in the group of its open database that is exposed to the Secret Service; a locked
    /// database hides them, and with no database open there is no collection at all (no `default` alias), where
    /// the GNOME keyring would create its login collection on the first write.
    public var isKeePassXC: Bool {
        let name = program.split(separator: "/").last.map(String.init) ?? program
        return name.lowercased().hasPrefix("keepassxc")
    }
}
