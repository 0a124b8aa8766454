import AuthCore
import FoundationEssentials

/// Pure parsers for the `/proc` files the agent reads to identify a caller, beyond the ones authctl reads too
/// (``ProcessTree``). They take the files' text, so the tests feed them recorded contents (systemd services, scopes,
/// Flatpak apps, containers without systemd).
public enum ProcFS {
    /// The systemd unit (a `.service` or `.scope`) the process belongs to, from `/proc/PID/cgroup`: the unified
    /// hierarchy's line (`0::/...`), else the v1 `name=systemd` line. A unified line that names only the root
    /// (`0::/`) says nothing: the kernel prints it whenever a cgroup2 file system is mounted, also where systemd
    /// tracks units in the v1 `name=systemd` hierarchy alone (legacy mode beside a mounted cgroup2), so the
    /// `name=systemd` line decides then. Slices are skipped; the first unit below them is the caller's, except
    /// `user@UID.service`, the user's service manager, whose own tree is followed (where `app.slice/mbsync.service`
    /// lives). Cgroups below the unit are the unit's own (a unit with delegation may name them anything), so they
    /// are ignored. Nil outside systemd (containers, `0::/`).
    public static func unit(cgroup: String) -> String? {
        bytes(cgroup) { bytes in
            var unified: Slice<UnsafeBufferPointer<UInt8>>?
            var named: Slice<UnsafeBufferPointer<UInt8>>?
            for line in bytes.split(separator: UInt8(ascii: "\n")) {
                // hierarchy-ID:controllers:path (the path may hold ':').
                guard let first = line.firstIndex(of: UInt8(ascii: ":")),
                      let second = line[(first + 1)...].firstIndex(of: UInt8(ascii: ":")) else { continue }
                let controllers = line[(first + 1)..<second], path = line[(second + 1)...]
                if line[..<first].elementsEqual("0".utf8), controllers.isEmpty {
                    unified = path
                } else if named == nil, controllers.elementsEqual("name=systemd".utf8) {
                    named = path
                }
            }
            guard let path = unified.flatMap({ $0.elementsEqual("/".utf8) ? nil : $0 }) ?? named else { return nil }
            for component in path.split(separator: UInt8(ascii: "/")) {
                if component.ends(with: ".slice") { continue }
                guard component.ends(with: ".service") || component.ends(with: ".scope") else { return nil }
                if component.starts(with: "user@".utf8) && component.ends(with: ".service") { continue }
                return String(decoding: component, as: UTF8.self)
            }
            return nil
        }
    }

    /// `body` over `text`'s UTF-8 bytes, in place when the string is native (a file's text always is): this runs once
    /// per socket connection, and reading the text as `Character`s was most of the accept loop's instructions per
    /// new connection.
    static func bytes<Result>(_ text: String, _ body: (UnsafeBufferPointer<UInt8>) -> Result) -> Result {
        var text = text
        return text.withUTF8(body)
    }

    /// The Flatpak app id from a scope name `app-flatpak-<APPID>-<N>.scope` (what `flatpak run` creates).
    public static func flatpakApp(unit: String) -> String? {
        guard unit.hasPrefix("app-flatpak-"), unit.hasSuffix(".scope") else { return nil }
        let middle = unit.dropFirst("app-flatpak-".count).dropLast(".scope".count)
        guard let dash = middle.lastIndex(of: "-"), !middle[middle.index(after: dash)...].isEmpty,
              middle[middle.index(after: dash)...].allSatisfy(\.isNumber) else { return nil }
        let app = String(middle[..<dash])
        return ClientRule.isFlatpakAppID(app) ? app : nil
    }

    /// The file system type of each mount in `/proc/PID/mountinfo`, by mount id (the first field; the type follows
    /// the lone `-` that ends the optional fields). Nil when a line does not have that shape.
    public static func filesystemTypes(mountinfo: String) -> [UInt64: String]? {
        var types: [UInt64: String] = [:]
        for line in mountinfo.utf8.split(separator: UInt8(ascii: "\n")) {
            let fields = line.split(separator: UInt8(ascii: " "))
            guard let first = fields.first, let id = UInt64(String(decoding: first, as: UTF8.self)),
                  let dash = fields.firstIndex(where: { $0.elementsEqual("-".utf8) }), dash >= 6,
                  dash + 1 < fields.endIndex else { return nil }
            types[id] = String(decoding: fields[dash + 1], as: UTF8.self)
        }
        return types
    }
}

private extension Slice<UnsafeBufferPointer<UInt8>> {
    func ends(with suffix: String) -> Bool {
        count >= suffix.utf8.count && self.suffix(suffix.utf8.count).elementsEqual(suffix.utf8)
    }
}

extension ProcFS {
    /// The namespaces bubblewrap reports with `--info-fd` (a JSON object; bwrap 0.8 writes `child-pid` and one
    /// `NAME-namespace` inode per namespace it made), of which the agent compares two.
    public struct BwrapNamespaces: Decodable, Equatable, Sendable {
        public var pid: UInt64?
        public var mount: UInt64?

        enum CodingKeys: String, CodingKey {
            case pid = "pid-namespace", mount = "mnt-namespace"
        }
    }

    /// A `bwrapinfo.json`'s namespaces; nil when the text is not a JSON object whose namespaces are numbers.
    public static func bwrapNamespaces(json: String) -> BwrapNamespaces? {
        try? JSONDecoder().decode(BwrapNamespaces.self, from: Data(json.utf8))
    }
}
