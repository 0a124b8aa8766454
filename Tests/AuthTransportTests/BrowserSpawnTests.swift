@testable import AuthTransport
import CAgentProcess
import Foundation
import XCTest

/// The browser is started without Foundation's `Process`: these check what the child gets and that it is reaped.
final class BrowserSpawnTests: XCTestCase {
    private var directory: URL!

    override func setUpWithError() throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("browser-spawn-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(at: directory)
    }

    /// A "browser" that writes its arguments next to itself and then becomes `sleep`, so its descriptors can be read
    /// from outside (`/proc/PID/fd`) without a shell's own descriptors among them.
    private func recordingBrowser() throws -> URL {
        let script = directory.appendingPathComponent("browser")
        try """
        #!/bin/sh
        printf 'argc=%s\\narg1=%s\\n' "$#" "$1" >"$(dirname "$0")/out.tmp"
        mv "$(dirname "$0")/out.tmp" "$(dirname "$0")/out"
        exec sleep 30
        """.write(to: script, atomically: true, encoding: .utf8)
        try FileManager.default.setAttributes([.posixPermissions: 0o700], ofItemAtPath: script.path)
        return script
    }

    private func waitUntil(_ condition: () -> Bool) -> Bool {
        let deadline = Date().addingTimeInterval(10)
        while !condition() {
            if Date() > deadline { return false }
            usleep(10_000)
        }
        return true
    }

    func testTheBrowserGetsTheURLAsItsOnlyArgument() async throws {
        let script = try recordingBrowser()
        let launcher = ExecBrowserLauncher(environment: ["BROWSER": script.path, "PATH": "/usr/bin:/bin"])
        let url = "http://127.0.0.1:8080/authorize?state=a%20b;c&x=$(id)"
        try await launcher.open(URL(string: url)!)
        let out = directory.appendingPathComponent("out")
        XCTAssertTrue(waitUntil { FileManager.default.fileExists(atPath: out.path) }, "the browser did not run")
        XCTAssertEqual(try String(contentsOf: out, encoding: .utf8), "argc=1\narg1=\(url)\n")
    }

    func testTheBrowserGetsNullStdinAndStdoutAndNoOtherDescriptorOfTheAgent() throws {
        let script = try recordingBrowser()
        // A descriptor without close-on-exec, as a careless library might leave one: the browser must not get it.
        let leaky = open("/dev/null", O_RDONLY)
        XCTAssertGreaterThan(leaky, 2)
        defer { close(leaky) }
        let pid = ExecBrowserLauncher.spawn(script.path, argument: "https://example.com/")
        XCTAssertGreaterThan(pid, 0)
        defer { kill(pid, SIGKILL) }
        let exe = { (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/exe")) ?? "" }
        XCTAssertTrue(waitUntil { exe().hasSuffix("/sleep") }, "the browser did not get to exec sleep: \(exe())")
        let fdDirectory = "/proc/\(pid)/fd"
        let fds = { (try? FileManager.default.contentsOfDirectory(atPath: fdDirectory).compactMap(Int.init).sorted()) ?? [] }
        // Right after the exec, sleep's loader and setlocale briefly hold a descriptor of their own (ld.so.cache, the
        // locale archive); a leaked one never goes away.
        _ = waitUntil { fds() == [0, 1, 2] }
        XCTAssertEqual(fds(), [0, 1, 2])
        for fd in [0, 1] {
            XCTAssertEqual(try FileManager.default.destinationOfSymbolicLink(atPath: "\(fdDirectory)/\(fd)"), "/dev/null")
        }
    }

    func testAnExitedChildIsReapedWithoutAnyoneWaiting() throws {
        let pid = ExecBrowserLauncher.spawn("/bin/true", argument: "https://example.com/")
        XCTAssertGreaterThan(pid, 0)
        // A zombie still answers kill(pid, 0); only a reaped child is gone.
        let deadline = Date().addingTimeInterval(10)
        while kill(pid, 0) == 0, Date() < deadline { usleep(10_000) }
        XCTAssertEqual(kill(pid, 0), -1, "the child was not reaped")
        XCTAssertEqual(errno, ESRCH)
    }

    func testAProgramThatCannotStartIsReportedWithItsReason() async throws {
        XCTAssertEqual(ExecBrowserLauncher.spawn("/nonexistent/browser", argument: "https://example.com/"), -ENOENT)
        let notExecutable = directory.appendingPathComponent("plain")
        try "not a program".write(to: notExecutable, atomically: true, encoding: .utf8)
        try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: notExecutable.path)
        XCTAssertEqual(ExecBrowserLauncher.spawn(notExecutable.path, argument: "x"), -EACCES)
        let launcher = ExecBrowserLauncher(environment: ["BROWSER": notExecutable.path, "PATH": "/nonexistent"])
        do {
            try await launcher.open(URL(string: "https://example.com/authorize")!)
            XCTFail("a browser that cannot start was reported as started")
        } catch {
            XCTAssertEqual(error.code, .loginFailed)
            XCTAssertTrue(error.message.contains("no browser found"), "a $BROWSER that is not executable is skipped: \(error.message)")
        }
    }

    // MARK: Under systemd: the browser as a transient user service

    /// A `systemd-run` that writes its arguments (one per line) to `systemd-run.args`, then behaves as `mode` says:
    /// `start` runs the command after `--` in the background (as the user manager would) and exits 0, `fail` exits 1,
    /// `hang` never exits.
    private func fakeSystemdRun(_ mode: String) throws -> URL {
        let bin = directory.appendingPathComponent("bin")
        try FileManager.default.createDirectory(at: bin, withIntermediateDirectories: true)
        let script = bin.appendingPathComponent("systemd-run")
        try """
        #!/bin/sh
        printf '%s\n' "$@" >"\(directory.path)/systemd-run.args"
        case \(mode) in
        fail) echo "Unknown assignment: ExitType=cgroup" >&2; exit 1 ;;
        hang) exec sleep 30 ;;
        esac
        while [ "$1" != "--" ]; do shift; done
        shift
        "$@" &
        exit 0
        """.write(to: script, atomically: true, encoding: .utf8)
        try FileManager.default.setAttributes([.posixPermissions: 0o700], ofItemAtPath: script.path)
        return bin
    }

    private func systemdEnvironment(browser: URL, bin: URL) -> [String: String] {
        ["BROWSER": browser.path, "PATH": "\(bin.path):/usr/bin:/bin", "INVOCATION_ID": "0123456789abcdef",
         "DISPLAY": ":5", "WAYLAND_DISPLAY": "wayland-1", "HOME": "/home/nobody", "AUTH_AGENT_SECRET_LOOKING": "x"]
    }

    private func recordedSystemdRunArguments() throws -> [String] {
        try String(contentsOf: directory.appendingPathComponent("systemd-run.args"), encoding: .utf8)
            .split(separator: "\n", omittingEmptySubsequences: false).dropLast().map(String.init)
    }

    func testUnderSystemdTheBrowserIsATransientUnitOfTheUserManager() async throws {
        let browser = try recordingBrowser()
        let bin = try fakeSystemdRun("start")
        let url = "https://issuer.example/authorize?state=s1&code_challenge=c1"
        let launcher = ExecBrowserLauncher(environment: systemdEnvironment(browser: browser, bin: bin))
        try await launcher.open(URL(string: url)!)
        let arguments = try recordedSystemdRunArguments()
        XCTAssertEqual(Array(arguments.prefix(6)), ["--user", "--quiet", "--collect", "--no-ask-password",
                                                    "--description=auth-agent: web browser for a sign-in",
                                                    "--property=ExitType=cgroup"])
        XCTAssertEqual(Array(arguments.suffix(3)), ["--", browser.path, url])
        XCTAssertEqual(arguments.filter { $0.hasPrefix("--setenv") }, [],
                       "the unit gets the user manager's current environment, not the agent's copy from its start")
        XCTAssertFalse(arguments.contains { $0.contains(url) && $0 != url }, "the URL is only the command's argument")
        let out = directory.appendingPathComponent("out")
        XCTAssertTrue(waitUntil { FileManager.default.fileExists(atPath: out.path) }, "the unit's browser did not run")
        XCTAssertEqual(try String(contentsOf: out, encoding: .utf8), "argc=1\narg1=\(url)\n")
    }

    func testWhenSystemdRunFailsTheBrowserIsStartedDirectly() async throws {
        let browser = try recordingBrowser()
        let bin = try fakeSystemdRun("fail")
        let url = "https://issuer.example/authorize?state=s2"
        try await ExecBrowserLauncher(environment: systemdEnvironment(browser: browser, bin: bin)).open(URL(string: url)!)
        XCTAssertFalse(try recordedSystemdRunArguments().isEmpty, "systemd-run was not tried")
        let out = directory.appendingPathComponent("out")
        XCTAssertTrue(waitUntil { FileManager.default.fileExists(atPath: out.path) }, "no fallback to a direct start")
        XCTAssertEqual(try String(contentsOf: out, encoding: .utf8), "argc=1\narg1=\(url)\n")
    }

    func testASystemdRunThatHangsIsKilledAndTheBrowserStartedDirectly() async throws {
        let browser = try recordingBrowser()
        let bin = try fakeSystemdRun("hang")
        let launcher = ExecBrowserLauncher(environment: systemdEnvironment(browser: browser, bin: bin),
                                           transientUnitTimeout: .milliseconds(300))
        let started = ContinuousClock.now
        try await launcher.open(URL(string: "https://issuer.example/authorize?state=s3")!)
        XCTAssertLessThan(ContinuousClock.now - started, .seconds(5))
        let out = directory.appendingPathComponent("out")
        XCTAssertTrue(waitUntil { FileManager.default.fileExists(atPath: out.path) }, "no fallback after the time-out")
    }

    func testOutsideSystemdSystemdRunIsNotUsed() async throws {
        let browser = try recordingBrowser()
        let bin = try fakeSystemdRun("start")
        var environment = systemdEnvironment(browser: browser, bin: bin)
        environment["INVOCATION_ID"] = nil
        try await ExecBrowserLauncher(environment: environment).open(URL(string: "https://issuer.example/a")!)
        let out = directory.appendingPathComponent("out")
        XCTAssertTrue(waitUntil { FileManager.default.fileExists(atPath: out.path) })
        XCTAssertFalse(FileManager.default.fileExists(atPath: directory.appendingPathComponent("systemd-run.args").path))
    }

    func testRunBoundedReportsExitStatusAndTimeOut() async throws {
        let exitStatus = await ExecBrowserLauncher.runBounded("/bin/sh", ["-c", "exit 3"], timeout: .seconds(5))
        XCTAssertEqual(exitStatus, 3)
        let timedOut = await ExecBrowserLauncher.runBounded("/bin/sleep", ["30"], timeout: .milliseconds(100))
        XCTAssertEqual(timedOut, -ETIMEDOUT)
        let missing = await ExecBrowserLauncher.runBounded("/nonexistent/program", [], timeout: .seconds(1))
        XCTAssertEqual(missing, -ENOENT)
    }
}
