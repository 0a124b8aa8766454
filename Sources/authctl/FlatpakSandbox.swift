import AuthCLI
import Glibc

/// The Flatpak sandbox authctl runs in, if any: Flatpak puts `/.flatpak-info` in every sandbox's root and sets
/// `container=flatpak`. Read only when the agent cannot be reached, never on the way to a token.
enum FlatpakSandbox {
    static var isInside: Bool {
        access("/.flatpak-info", F_OK) == 0 || getenv("container").map { String(cString: $0) } == "flatpak"
    }

    /// `/.flatpak-info`'s first 64 KiB (the groups read come first), or "" when it cannot be read; `complete` when
    /// that was all of it.
    static func info() -> (text: String, complete: Bool) {
        guard let file = fopen("/.flatpak-info", "r") else { return ("", true) }
        defer { fclose(file) }
        var bytes = [UInt8](repeating: 0, count: 65536)
        let count = fread(&bytes, 1, bytes.count, file)
        return (String(decoding: bytes.prefix(count), as: UTF8.self), count < bytes.count)
    }

    /// authctl's failure when nothing answers on `socket` inside a sandbox; nil outside one. Whether the app has the
    /// socket's permission comes from its `/.flatpak-info`, else from whether the socket's directory is there.
    static func unreachable(socket: String) -> CLIFailure? {
        guard isInside else { return nil }
        let info = info()
        let read = SandboxReach.read(flatpakInfo: info.text, complete: info.complete)
        let app = getenv("FLATPAK_ID").map { String(cString: $0) }.flatMap { $0.isEmpty ? nil : $0 } ?? read.app
        let directory = socket.split(separator: "/", omittingEmptySubsequences: false).dropLast().joined(separator: "/")
        let shown = read.showsSocket ?? (access(directory, F_OK) == 0)
        let said = SandboxReach.unreachable(app: app, socket: socket, socketShown: shown)
        return CLIFailure(message: said.message, hint: said.hint, exit: ExitStatus.agentNotRunning)
    }
}
