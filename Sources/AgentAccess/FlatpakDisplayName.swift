import Glibc
import AuthCore

/// The name the desktop shows for an installed Flatpak app: the `Name=` of its exported desktop file
/// (`$XDG_DATA_HOME/flatpak/exports/share/applications/APP.desktop` for a user install, then
/// `/var/lib/flatpak/exports/...` for a system one). Written there by Flatpak when the app was installed, so it says
/// which installed app an id belongs to; the text is still the app's own words (the consent question says so).
enum FlatpakDisplayName {
    static let maxBytes = 65536
    static let maxCharacters = 64

    /// The installed app's name, or nil (not installed here, no `Name=`, or the file cannot be read).
    static func lookup(_ app: String, dataHome: String? = FlatpakDisplayName.dataHome()) -> String? {
        let directories = (dataHome.map { ["\($0)/flatpak/exports/share/applications"] } ?? [])
            + ["/var/lib/flatpak/exports/share/applications"]
        for directory in directories {
            if let text = read("\(directory)/\(app).desktop"), let name = name(desktopEntry: text) { return name }
        }
        return nil
    }

    /// `$XDG_DATA_HOME`, else `$HOME/.local/share`.
    static func dataHome() -> String? {
        if let data = getenv("XDG_DATA_HOME").map({ String(cString: $0) }), data.hasPrefix("/") { return data }
        return getenv("HOME").map { String(cString: $0) + "/.local/share" }
    }

    /// The `Name` key of the `[Desktop Entry]` group (not a localized `Name[xx]`), printable and at most
    /// ``maxCharacters`` characters.
    static func name(desktopEntry text: String) -> String? {
        var inEntry = false
        for line in text.split(whereSeparator: \.isNewline) {
            if line.hasPrefix("[") { inEntry = line == "[Desktop Entry]"; continue }
            guard inEntry, line.hasPrefix("Name=") else { continue }
            let value = line.dropFirst(5).unicodeScalars.filter { $0.value >= 0x20 && $0.value != 0x7F }
            let name = String(String.UnicodeScalarView(value)).trimmingBlanks
            return name.isEmpty ? nil : String(name.prefix(maxCharacters))
        }
        return nil
    }

    /// A regular file of at most ``maxBytes``, opened without blocking (exports are symlinks into the installation:
    /// followed, it is the user's own data directory).
    private static func read(_ path: String) -> String? {
        let fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0, info.st_mode & S_IFMT == S_IFREG, info.st_size <= maxBytes else { return nil }
        var bytes = [UInt8](repeating: 0, count: Int(info.st_size))
        let count = bytes.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
        guard count >= 0 else { return nil }
        return String(decoding: bytes[..<count], as: UTF8.self)
    }
}
