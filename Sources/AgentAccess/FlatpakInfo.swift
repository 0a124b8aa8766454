import AuthCore

/// What a sandbox's `/.flatpak-info` says: the app, the instance, and the holes in the sandbox that make the app
/// as able as a host program of the user ("not contained"). Flatpak writes the file itself (`flatpak run`: a key
/// file with the final, flattened permissions: `[Context]` lists without `!` negations, `[Session Bus Policy]` one key
/// per bus name), read-only inside the sandbox. Pure: the tests feed it recorded texts.
public struct FlatpakInfo: Sendable, Equatable {
    /// `[Application] name`, when it is a valid application id.
    public var app: String?
    /// `[Instance] instance-id`: Flatpak's decimal instance number, which names the instance's directory
    /// (`$XDG_RUNTIME_DIR/.flatpak/ID`). Anything else is ignored.
    public var instance: String?
    /// The permissions that let the app act as any program of the user, as `flatpak override` spells them
    /// (`socket=session-bus`, `filesystem=home`, `talk-name=org.freedesktop.secrets`); empty for a contained app.
    public var holes: [String]

    /// Session bus names an app reaches the host through: `org.freedesktop.Flatpak` runs commands on the host
    /// (`flatpak-spawn --host`), `org.freedesktop.systemd1` starts host units, `org.freedesktop.secrets` hands out
    /// every secret of the user's keyring (the agent's refresh tokens among them).
    static let hostNames = ["org.freedesktop.Flatpak", "org.freedesktop.secrets", "org.freedesktop.systemd1"]

    public init(parsing text: String) {
        var group = ""
        var app: String?, instance: String?, holes: [String] = []
        // The first `name` and `instance-id` decide (Flatpak writes each once), valid or not.
        var named = false, numbered = false
        for raw in text.split(separator: "\n") {
            let line = raw.trimmingBlanks
            if line.hasPrefix("#") || line.isEmpty { continue }
            if line.hasPrefix("[") { group = line; continue }
            guard let equals = line.firstIndex(of: "=") else { continue }
            let key = line[..<equals].trimmingBlanks, value = line[line.index(after: equals)...].trimmingBlanks
            switch (group, key) {
            case ("[Application]", "name") where !named:
                named = true
                app = ClientRule.isFlatpakAppID(value) ? value : nil
            case ("[Instance]", "instance-id") where !numbered:
                numbered = true
                instance = FlatpakInfo.isInstanceID(value) ? value : nil
            case ("[Context]", "sockets"):
                holes += FlatpakInfo.list(value).filter { $0 == "session-bus" }.map { "socket=\($0)" }
            case ("[Context]", "filesystems"):
                holes += FlatpakInfo.list(value).filter(FlatpakInfo.isHostFilesystem).map { "filesystem=\($0)" }
            case ("[Session Bus Policy]", _) where value == "talk" || value == "own":
                if FlatpakInfo.hostNames.contains(where: { FlatpakInfo.covers(key, $0) }) {
                    holes.append("\(value)-name=\(key)")
                }
            default: continue
            }
        }
        // Each once, in the file's order (a list may repeat an entry; the audit record stays small).
        var seen = Set<String>()
        (self.app, self.instance, self.holes) = (app, instance, holes.filter { seen.insert($0).inserted })
    }

    /// A writable `host` or `home` (`home`, `home:rw`, `home:create`; `~` is written as `home`): the app can change
    /// what the user's host programs run (`~/.bashrc`, `~/.config/autostart`, `~/.config/systemd/user`). Read-only
    /// access (`:ro`) exposes files but runs nothing outside, so it is not a hole; nor are `host-os` and `host-etc`
    /// (system files, which the user cannot write either).
    static func isHostFilesystem(_ entry: String) -> Bool {
        let parts = entry.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false)
        guard parts[0] == "host" || parts[0] == "home" else { return false }
        return parts.count == 1 || parts[1] == "rw" || parts[1] == "create"
    }

    /// Whether a bus policy's name (`org.freedesktop.secrets`, or a prefix `org.freedesktop.*`) covers `name`.
    static func covers(_ policy: String, _ name: String) -> Bool {
        guard policy.hasSuffix(".*") else { return policy == name }
        let prefix = policy.dropLast(2)
        return name == prefix || name.hasPrefix(prefix + ".")
    }

    /// A key file string list (`a;b;c;`), split at unescaped `;` (GKeyFile escapes a `;` in an element as `\;`).
    /// Conditional entries (`if:session-bus:COND`) come after their plain name, which Flatpak writes too.
    static func list(_ value: String) -> [String] {
        var elements: [String] = [], current = "", escaped = false
        for character in value {
            if escaped {
                current.append(character)
                escaped = false
            } else if character == "\\" {
                current.append(character)
                escaped = true
            } else if character == ";" {
                elements.append(current)
                current = ""
            } else {
                current.append(character)
            }
        }
        if !current.isEmpty { elements.append(current) }
        return elements.filter { !$0.isEmpty }
    }

    /// Flatpak's instance ids are decimal numbers; only those name a directory the agent looks into.
    static func isInstanceID(_ value: String) -> Bool {
        (1...20).contains(value.utf8.count) && value.utf8.allSatisfy { (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }
    }
}
