import AuthCore
import CAgentProcess
import Dispatch
import FoundationEssentials
import Logging
import SessionEnvironment
import Glibc

/// Starts the user's browser with `execve` semantics: the program from `$BROWSER` (first usable entry of a
/// colon-separated list) or `xdg-open`, and exactly one argument, the URL. No shell is involved, so nothing in the
/// URL can be interpreted as a command. Only https URLs (or http on a loopback literal, for local test servers)
/// that do not start with '-' are passed (SECURITY.md 10).
///
/// Under systemd (the agent runs as `auth-agent.service`: `INVOCATION_ID` is set) the browser is started as a
/// transient user service through `systemd-run --user`, so the user manager starts it, not the agent: it gets none
/// of the unit's seccomp filters (`MemoryDenyWriteExecute` would break a JIT, `RestrictNamespaces` a browser's
/// sandbox) and lives in its own cgroup (stopping the agent does not close the browser). `ExitType=cgroup` keeps
/// that unit until the browser itself exits, not only `xdg-open`. If `systemd-run` is missing, fails (an older
/// systemd, no user manager) or takes longer than `transientUnitTimeout`, the browser is started directly, with a
/// warning in the log.
///
/// Processes are started with `posix_spawn`, not Foundation's `Process`: `Process` watches its children from a
/// run-loop thread of its own, and when the browser (or `xdg-open`) exits, that thread ran CoreFoundation code,
/// mapped again right after the idle agent had released its code pages (docs/BENCHMARKS.md, "Memory").
/// A small C thread reaps the child instead; the browser gets no descriptor of the agent's but stderr.
public struct ExecBrowserLauncher: BrowserLauncher {
    let environment: [String: String]
    let logger: Logger
    /// How long `systemd-run` may take to start the browser's unit before the browser is started directly.
    let transientUnitTimeout: Duration

    public init(environment: [String: String] = ProcessInfo.processInfo.environment,
                logger: Logger = Logger(label: "auth-agent.browser"), transientUnitTimeout: Duration = .seconds(5)) {
        self.environment = environment
        self.logger = logger
        self.transientUnitTimeout = transientUnitTimeout
    }

    public func open(_ url: URL) async throws(AuthError) {
        let text = try ExecBrowserLauncher.openable(url)
        let program = try resolveProgram()
        if let systemdRun = transientUnitRunner() {
            let arguments = transientUnitArguments(program: program, url: text)
            let status = await ExecBrowserLauncher.runBounded(systemdRun, arguments, timeout: transientUnitTimeout)
            if status == 0 { return }
            let outcome = status == -ETIMEDOUT ? "did not finish in time" : status < 0
                ? "could not start: \(String(cString: strerror(-status)))" : "exited with status \(status)"
            logger.warning("systemd-run \(outcome); starting the browser as the agent's child, inside its sandbox",
                           metadata: ["program": "\(program)"])
        }
        let started = ExecBrowserLauncher.spawn(program, argument: text)
        guard started > 0 else {
            throw AuthError(.loginFailed, "cannot start the browser \(program): \(String(cString: strerror(-started)))")
        }
    }

    /// `url` as the one argument a browser gets, if it may be opened at all (SECURITY.md 10): https, or http on a
    /// loopback literal (local test servers). The portal launcher applies the same rule.
    static func openable(_ url: URL) throws(AuthError) -> String {
        guard case .success = EndpointPolicy.validate(url.absoluteString) else {
            throw AuthError(.loginFailed, "refusing to open a URL that is not https (or loopback http)")
        }
        return url.absoluteString
    }

    /// `systemd-run`'s path when the agent runs as a systemd service and it is installed; nil otherwise.
    func transientUnitRunner() -> String? {
        guard let invocation = environment["INVOCATION_ID"], !invocation.isEmpty else { return nil }
        return BrowserCommand.which("systemd-run", path: environment["PATH"] ?? "/usr/local/bin:/usr/bin:/bin")
    }

    /// `systemd-run`'s arguments for starting `program url` as a transient user service. The description, not the
    /// command line, is what the journal's "Started ..." line shows. No `--setenv`: the unit gets the user manager's
    /// environment as it is now, so a display the session imported after the agent started
    /// (`systemctl --user import-environment DISPLAY WAYLAND_DISPLAY`, which desktops do at login) is the one the
    /// browser opens on; the agent's own copy, taken when it started, may name a display that has gone.
    func transientUnitArguments(program: String, url: String) -> [String] {
        ["--user", "--quiet", "--collect", "--no-ask-password",
         "--description=auth-agent: web browser for a sign-in", "--property=ExitType=cgroup", "--", program, url]
    }

    /// Starts `program` with one argument and does not wait for it; the child's pid, or -errno.
    static func spawn(_ program: String, argument: String) -> Int32 {
        withArgv(program, [argument]) { aa_process_spawn_detached(program, $0) }
    }

    /// Runs `program` with `arguments` off the concurrency pool and waits for it at most `timeout`: its exit status,
    /// -ETIMEDOUT (it was killed), or -errno when it could not start.
    static func runBounded(_ program: String, _ arguments: [String], timeout: Duration) async -> Int32 {
        let milliseconds = Int32(clamping: timeout.components.seconds * 1000 + timeout.components.attoseconds / 1_000_000_000_000_000)
        return await withCheckedContinuation { continuation in
            // Default QoS, as LibsecretCaller's queue: a higher one makes libdispatch try to renice its thread.
            DispatchQueue.global().async {
                continuation.resume(returning: withArgv(program, arguments) { aa_process_run_bounded(program, $0, milliseconds) })
            }
        }
    }

    /// A NULL-terminated C argv (`program` first) for `body`.
    private static func withArgv(_ program: String, _ arguments: [String],
                                 _ body: ([UnsafeMutablePointer<CChar>?]) -> Int32) -> Int32 {
        let argv: [UnsafeMutablePointer<CChar>?] = ([program] + arguments).map { strdup($0) } + [nil]
        defer { for pointer in argv { free(pointer) } }
        guard !argv.dropLast().contains(where: { $0 == nil }) else { return -ENOMEM }
        return body(argv)
    }

    /// The browser program to run, as an absolute path (the rule lives in SessionEnvironment, shared with
    /// `authctl doctor`).
    func resolveProgram() throws(AuthError) -> String {
        guard let found = BrowserCommand.resolve(environment: environment) else {
            throw AuthError(.loginFailed, BrowserCommand.notFoundMessage)
        }
        return found.path
    }

    /// What `authctl doctor` reports: the program the agent would start, or why there is none, and whose environment
    /// gives the browser its display. Under systemd that is the user manager's, which this launcher cannot read
    /// (``BrowserLocation/displaySource`` is `user manager` with no values: the D-Bus side fills them in);
    /// otherwise the agent's own.
    public func locate() -> BrowserLocation {
        var location = BrowserLocation(program: nil, source: nil, problem: BrowserCommand.notFoundMessage)
        if let found = BrowserCommand.resolve(environment: environment) {
            location = BrowserLocation(program: found.path, source: found.source, problem: nil)
        }
        if transientUnitRunner() != nil {
            location.displaySource = BrowserLocation.userManager
        } else {
            location.displaySource = "agent"
            location.display = environment["DISPLAY"]
            location.waylandDisplay = environment["WAYLAND_DISPLAY"]
        }
        return location
    }
}
