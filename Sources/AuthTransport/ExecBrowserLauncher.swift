import AuthCore
import Foundation

/// Starts the user's browser with `execve` semantics: the program from `$BROWSER` (first usable entry of a
/// colon-separated list) or `xdg-open`, and exactly one argument, the URL. No shell is involved, so nothing in the
/// URL can be interpreted as a command. Only https URLs (or http on a loopback literal, for local test servers)
/// that do not start with '-' are passed (SECURITY.md 10).
public struct ExecBrowserLauncher: BrowserLauncher {
    let environment: [String: String]

    public init(environment: [String: String] = ProcessInfo.processInfo.environment) { self.environment = environment }

    public func open(_ url: URL) throws(AuthError) {
        let text = url.absoluteString
        guard case .success = EndpointPolicy.validate(text) else {
            throw AuthError(.loginFailed, "refusing to open a URL that is not https (or loopback http)")
        }
        let program = try resolveProgram()
        let process = Process()
        process.executableURL = URL(fileURLWithPath: program)
        process.arguments = [text]
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = FileHandle.nullDevice
        process.terminationHandler = { _ in }  // reaped by Foundation; no zombies
        do {
            try process.run()
        } catch {
            throw AuthError(.loginFailed, "cannot start the browser \(program): \(error.localizedDescription)")
        }
    }

    /// The browser program to run, as an absolute path.
    func resolveProgram() throws(AuthError) -> String {
        var candidates: [String] = []
        if let browser = environment["BROWSER"], !browser.isEmpty {
            // Entries with spaces or %s expect a shell; we never use one, so they are skipped.
            candidates += browser.split(separator: ":").map(String.init).filter { !$0.contains(" ") && !$0.contains("%") }
        }
        candidates.append("xdg-open")
        for candidate in candidates {
            if let path = ExecBrowserLauncher.which(candidate, path: environment["PATH"] ?? "/usr/local/bin:/usr/bin:/bin") {
                return path
            }
        }
        throw AuthError(.loginFailed, "no browser found: set $BROWSER or install xdg-utils")
    }

    static func which(_ name: String, path: String) -> String? {
        if name.contains("/") { return access(name, X_OK) == 0 ? name : nil }
        for directory in path.split(separator: ":") where directory.hasPrefix("/") {
            let full = "\(directory)/\(name)"
            if access(full, X_OK) == 0 { return full }
        }
        return nil
    }
}
