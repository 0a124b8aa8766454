import AuthCore
import ConfigFile

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

    /// `text` is the file, or its first bytes when `complete` is false (an app sets the file's size: `--env` in its
    /// metadata is copied into it). The groups the agent reads come first (`flatpak run` writes `[Application]`,
    /// `[Instance]`, `[Context]` and the bus policies before `[Environment]`); a prefix that ends before
    /// `[Environment]` may have cut the permissions short, so the app is taken as not contained. `home` is the
    /// user's home directory, against which filesystem permissions are judged (``reachesHostCode(_:home:)``).
    public init(parsing text: String, complete: Bool = true, home: String? = nil) {
        var group = ""
        var app: String?, instance: String?, holes: [String] = []
        // The first `name` and `instance-id` decide (Flatpak writes each once), valid or not.
        var named = false, numbered = false, permissionsRead = complete
        for line in KeyFile.lines(text, complete: complete) {
            guard case .entry(let key, let value) = line else {
                if case .group(let name) = line {
                    group = name
                    if group == "Environment" { permissionsRead = true }
                }
                continue
            }
            switch (group, key) {
            case ("Application", "name") where !named:
                named = true
                app = ClientRule.isFlatpakAppID(value) ? value : nil
            case ("Instance", "instance-id") where !numbered:
                numbered = true
                instance = FlatpakInfo.isInstanceID(value) ? value : nil
            case ("Context", "sockets"):
                holes += KeyFile.list(value).filter { $0 == "session-bus" }.map { "socket=\($0)" }
            case ("Context", "filesystems"):
                holes += KeyFile.list(value).filter { FlatpakInfo.reachesHostCode($0, home: home) }.map { "filesystem=\($0)" }
            case ("Session Bus Policy", _) where value == "talk" || value == "own":
                if FlatpakInfo.hostNames.contains(where: { FlatpakInfo.covers(key, $0) }) {
                    holes.append("\(value)-name=\(key)")
                }
            default: continue
            }
        }
        if !permissionsRead { holes.append(FlatpakInfo.unreadPermissions) }
        // Each once, in the file's order (a list may repeat an entry; the audit record stays small).
        var seen = Set<String>()
        (self.app, self.instance, self.holes) = (app, instance, holes.filter { seen.insert($0).inserted })
    }

    /// How much of a `/.flatpak-info` the agent reads: the groups it needs come first.
    static let prefixBytes = 65536

    /// The hole named when the permissions were not read to their end.
    static let unreadPermissions = "permissions-past-\(prefixBytes / 1024)-KiB-unread"

    /// The kind of caller whose root holds this marker text (all of it, or its first ``prefixBytes``: `complete`
    /// false): the app it names, or `unidentified` when it names none or `mismatch` (its instance's namespaces
    /// against the caller's, ``FlatpakInstance``) says why the app is not believed. Pure: the fuzz target runs it.
    static func kind(marker text: String, complete: Bool, home: String?,
                     mismatch: (_ instance: String?) -> String?) -> ClientIdentity.Kind {
        let info = FlatpakInfo(parsing: text, complete: complete, home: home)
        guard let app = info.app else {
            return .unidentified(why: complete ? "its /.flatpak-info names no valid application id"
                                               : "the first \(prefixBytes / 1024) KiB of its /.flatpak-info name no valid application id")
        }
        if let why = mismatch(info.instance) { return .unidentified(why: why, claimedApp: app) }
        return .flatpak(.init(id: app, instance: info.instance, holes: info.holes))
    }

    /// Whether a writable filesystem permission reaches what the user's host programs run, judged by the place it
    /// names, not by how it is spelt: the whole host (`host`, `/`), the home directory or any directory above it
    /// (`home`, `~`, `/home`, the home's absolute path), anything in one of its ``startupEntries`` (`~/.bashrc`,
    /// `~/.config/autostart`, `~/.local/share/applications`, `~/.ssh`; `xdg-config`, `xdg-data` and `xdg-state` are
    /// in them), and the runtime directory's session bus and user manager sockets (`xdg-run`, `xdg-run/bus`,
    /// `xdg-run/systemd`, read-only or not). `:ro` elsewhere exposes files but runs nothing outside; nor do `host-os` and `host-etc` (system
    /// files, which the user cannot write either). A path with `..` in it counts (fail closed).
    static func reachesHostCode(_ entry: String, home: String?) -> Bool {
        var place = Substring(entry), readOnly = false
        if let colon = entry.lastIndex(of: ":"), ["ro", "rw", "create"].contains(entry[entry.index(after: colon)...]) {
            (place, readOnly) = (entry[..<colon], entry.hasSuffix(":ro"))
        }
        let parts = place.split(separator: "/", omittingEmptySubsequences: true)
        // A socket is reached through a read-only mount as well: connect() asks no write access of the mount.
        if parts.first == "xdg-run" { return parts.count == 1 || parts[1] == "bus" || parts[1] == "systemd" }
        if readOnly { return false }
        if parts.contains("..") { return true }
        // Where the place is, as components below the home directory.
        let inHome: [Substring]
        switch parts.first {
        case _ where place.hasPrefix("/"):
            let homeParts = (home ?? "").split(separator: "/")
            guard !homeParts.isEmpty else { return true }  // no home to compare with: fail closed
            // An ancestor of the home directory (or the home itself) reaches all of it.
            if parts.count <= homeParts.count { return Array(homeParts.prefix(parts.count)) == parts }
            guard Array(parts.prefix(homeParts.count)) == homeParts else { return false }
            inHome = Array(parts.dropFirst(homeParts.count))
        case "host"?: return parts.count == 1
        case "home"?, "~"?: inHome = Array(parts.dropFirst())
        case "xdg-config"?, "xdg-data"?, "xdg-state"?:
            return true  // ~/.config, ~/.local/share, ~/.local/state and anything in them
        default: return false  // another xdg- directory (~/Documents and the like), host-os, host-etc
        }
        guard let top = inHome.first else { return true }  // the whole home
        return startupEntries.contains(String(top))
    }

    /// The entries of a home directory that what the user's host programs run comes from: the XDG directories
    /// (autostart, user units, D-Bus services, `.desktop` files, `~/.local/bin` on `PATH`), shell and session
    /// start-up files, ssh, GnuPG and git configuration (each can name a program to run), and `~/bin`, which
    /// Debian's `~/.profile` puts on `PATH`.
    static let startupEntries: Set<String> = [
        ".config", ".local", "bin", ".profile", ".bashrc", ".bash_profile", ".bash_login", ".bash_logout", ".zshrc",
        ".zshenv", ".zprofile", ".zlogin", ".xprofile", ".xinitrc", ".xsession", ".xsessionrc", ".pam_environment",
        ".ssh", ".gnupg", ".gitconfig",
    ]

    /// Whether a bus policy's name (`org.freedesktop.secrets`, or a prefix `org.freedesktop.*`) covers `name`.
    static func covers(_ policy: String, _ name: String) -> Bool {
        guard policy.hasSuffix(".*") else { return policy == name }
        let prefix = policy.dropLast(2)
        return name == prefix || name.hasPrefix(prefix + ".")
    }

    /// Flatpak's instance ids are decimal numbers; only those name a directory the agent looks into.
    static func isInstanceID(_ value: String) -> Bool {
        (1...20).contains(value.utf8.count) && value.utf8.allSatisfy { (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }
    }
}
