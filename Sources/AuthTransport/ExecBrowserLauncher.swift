import AuthCore
import Foundation
import SessionEnvironment

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

    /// The browser program to run, as an absolute path (the rule lives in SessionEnvironment, shared with
    /// `authctl doctor`).
    func resolveProgram() throws(AuthError) -> String {
        guard let found = BrowserCommand.resolve(environment: environment) else {
            throw AuthError(.loginFailed, BrowserCommand.notFoundMessage)
        }
        return found.path
    }

    /// What `authctl doctor` reports: the program the agent would start, or why there is none.
    public func locate() -> BrowserLocation {
        guard let found = BrowserCommand.resolve(environment: environment) else {
            return BrowserLocation(program: nil, source: nil, problem: BrowserCommand.notFoundMessage)
        }
        return BrowserLocation(program: found.path, source: found.source, problem: nil)
    }
}
