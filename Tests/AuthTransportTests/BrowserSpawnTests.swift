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

    func testTheBrowserGetsTheURLAsItsOnlyArgument() throws {
        let script = try recordingBrowser()
        let launcher = ExecBrowserLauncher(environment: ["BROWSER": script.path, "PATH": "/usr/bin:/bin"])
        let url = "http://127.0.0.1:8080/authorize?state=a%20b;c&x=$(id)"
        try launcher.open(URL(string: url)!)
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
        let fds = try FileManager.default.contentsOfDirectory(atPath: fdDirectory).compactMap(Int.init).sorted()
        XCTAssertEqual(fds, [0, 1, 2])
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

    func testAProgramThatCannotStartIsReportedWithItsReason() throws {
        XCTAssertEqual(ExecBrowserLauncher.spawn("/nonexistent/browser", argument: "https://example.com/"), -ENOENT)
        let notExecutable = directory.appendingPathComponent("plain")
        try "not a program".write(to: notExecutable, atomically: true, encoding: .utf8)
        try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: notExecutable.path)
        XCTAssertEqual(ExecBrowserLauncher.spawn(notExecutable.path, argument: "x"), -EACCES)
        let launcher = ExecBrowserLauncher(environment: ["BROWSER": notExecutable.path, "PATH": "/nonexistent"])
        XCTAssertThrowsError(try launcher.open(URL(string: "https://example.com/authorize")!))
    }
}
