/// A snap's identity from its AppArmor label (`/proc/PID/attr/current`, or `attr/apparmor/current` where the kernel
/// stacks security modules): snapd confines each app of a strictly confined snap in the profile
/// `snap.NAME.APP` (a hook in `snap.NAME.hook.HOOK`), and the kernel, not the process, says which profile it runs in
/// and in which mode. Pure: the tests feed it recorded labels. Parsed only: a strict snap reaches no host service
/// without an interface, and auth-agent offers none (docs/INTEGRATIONS.md), so no rule names snaps yet.
public struct SnapLabel: Sendable, Equatable {
    /// The snap's instance name (`firefox`, or `firefox_beta` for a parallel install).
    public var snap: String
    /// The app (`firefox`), or the hook (`configure`) when ``isHook``.
    public var app: String
    public var isHook: Bool
    /// The profile's mode: `enforce` for a strictly confined snap; `complain` (devmode) confines nothing.
    public var mode: String

    /// Confined: the profile is enforced.
    public var isStrict: Bool { mode == "enforce" }

    public init(snap: String, app: String, isHook: Bool = false, mode: String = "enforce") {
        (self.snap, self.app, self.isHook, self.mode) = (snap, app, isHook, mode)
    }

    /// The label's snap, or nil for any other label (`unconfined`, a distribution's profile such as
    /// `/usr/bin/man (enforce)`, snapd's own `snap-update-ns.NAME`, or a malformed one).
    public init?(label: String) {
        var text = Substring(label)
        while text.last == "\n" || text.last == "\0" { text = text.dropLast() }
        guard text.hasSuffix(")"), let open = text.lastIndex(of: "("), open > text.startIndex,
              text[text.index(before: open)] == " " else { return nil }
        let mode = text[text.index(after: open)..<text.index(before: text.endIndex)]
        let parts = text[..<text.index(before: open)].split(separator: ".", omittingEmptySubsequences: false)
        guard ["enforce", "complain", "kill", "unconfined"].contains(mode), parts.first == "snap",
              parts.count == 3 || (parts.count == 4 && parts[2] == "hook"),
              SnapLabel.isInstanceName(parts[1]), SnapLabel.isAppName(parts[parts.count - 1]) else { return nil }
        (snap, app, isHook, self.mode) = (String(parts[1]), String(parts[parts.count - 1]), parts.count == 4, String(mode))
    }

    /// snapd's rule for snap names (1-40 of `a-z0-9-`, at least one letter, no leading, trailing or double hyphen),
    /// with an optional instance key (`_` and 1-10 of `a-z0-9`).
    static func isInstanceName(_ name: Substring) -> Bool {
        let halves = name.split(separator: "_", maxSplits: 1, omittingEmptySubsequences: false)
        let snap = halves[0]
        guard (1...40).contains(snap.count), snap.contains(where: { ("a"..."z").contains($0) }),
              snap.allSatisfy({ ("a"..."z").contains($0) || ("0"..."9").contains($0) || $0 == "-" }),
              !snap.hasPrefix("-"), !snap.hasSuffix("-"), !snap.contains("--") else { return false }
        guard halves.count == 2 else { return true }
        return (1...10).contains(halves[1].count) && halves[1].allSatisfy { ("a"..."z").contains($0) || ("0"..."9").contains($0) }
    }

    /// snapd's rule for app and hook names: letters, digits and hyphens, starting and ending with a letter or digit.
    static func isAppName(_ name: Substring) -> Bool {
        let alphanumeric: (Character) -> Bool = { ("a"..."z").contains($0) || ("A"..."Z").contains($0) || ("0"..."9").contains($0) }
        guard let first = name.first, let last = name.last, alphanumeric(first), alphanumeric(last) else { return false }
        return name.allSatisfy { alphanumeric($0) || $0 == "-" }
    }
}
