import AuthCore
import CAgentProcess
import Foundation
import SessionEnvironment

/// Starts the user's browser with `execve` semantics: the program from `$BROWSER` (first usable entry of a
/// colon-separated list) or `xdg-open`, and exactly one argument, the URL. No shell is involved, so nothing in the
/// URL can be interpreted as a command. Only https URLs (or http on a loopback literal, for local test servers)
/// that do not start with '-' are passed (SECURITY.md 10).
///
/// The browser is started with `posix_spawn`, not Foundation's `Process`: `Process` watches its children from a
/// run-loop thread of its own, and when the browser (or `xdg-open`) exits, that thread ran about 2 MB of
/// CoreFoundation code, mapped again right after the idle agent had released its code pages (docs/BENCHMARKS.md).
/// A small C thread reaps the child instead; the browser gets no descriptor of the agent's but stderr.
public struct ExecBrowserLauncher: BrowserLauncher {
    let environment: [String: String]

    public init(environment: [String: String] = ProcessInfo.processInfo.environment) { self.environment = environment }

    public func open(_ url: URL) throws(AuthError) {
        let text = url.absoluteString
        guard case .success = EndpointPolicy.validate(text) else {
            throw AuthError(.loginFailed, "refusing to open a URL that is not https (or loopback http)")
        }
        let program = try resolveProgram()
        let started = ExecBrowserLauncher.spawn(program, argument: text)
        guard started > 0 else {
            throw AuthError(.loginFailed, "cannot start the browser \(program): \(String(cString: strerror(-started)))")
        }
    }

    /// Starts `program` with one argument and does not wait for it; the child's pid, or -errno.
    static func spawn(_ program: String, argument: String) -> Int32 {
        let argv: [UnsafeMutablePointer<CChar>?] = [strdup(program), strdup(argument), nil]
        defer { for pointer in argv { free(pointer) } }
        guard argv[0] != nil, argv[1] != nil else { return -ENOMEM }
        return aa_process_spawn_detached(program, argv)
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
