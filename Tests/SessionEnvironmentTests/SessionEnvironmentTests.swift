#if canImport(Glibc)
import Glibc
#endif
import SessionEnvironment
import XCTest

final class SessionEnvironmentTests: XCTestCase {
    func testBrowserCandidatesSkipShellForms() {
        let parsed = BrowserCommand.candidates(browserVariable: "firefox %s:/opt/b/browser:w3m")
        XCTAssertEqual(parsed.names.map(\.name), ["/opt/b/browser", "w3m", "xdg-open"])
        XCTAssertEqual(parsed.skipped, ["firefox %s"])
        XCTAssertEqual(BrowserCommand.candidates(browserVariable: nil).names.map(\.name), ["xdg-open"])
    }

    func testResolveSearchesPathInOrder() throws {
        let dir = "/tmp/aa-browser-\(getpid())"
        mkdir(dir, 0o700)
        defer { unlink("\(dir)/mybrowser"); rmdir(dir) }
        XCTAssertNil(BrowserCommand.resolve(environment: ["PATH": dir, "BROWSER": "mybrowser"]))
        let fd = open("\(dir)/mybrowser", O_CREAT | O_WRONLY, 0o700)
        close(fd)
        XCTAssertEqual(BrowserCommand.resolve(environment: ["PATH": "/nonexistent:\(dir)", "BROWSER": "nothing-here:mybrowser"]),
                       .init(path: "\(dir)/mybrowser", source: "BROWSER"))
    }

    func testSessionKind() {
        let remote = SessionKind(environment: ["SSH_CONNECTION": "1 2 3 4", "DISPLAY": ":0"])
        XCTAssertTrue(remote.ssh)
        XCTAssertFalse(remote.headless)
        XCTAssertTrue(SessionKind(environment: ["SSH_TTY": "/dev/pts/1", "DISPLAY": ":0"]).ssh)
        let wayland = SessionKind(environment: ["WAYLAND_DISPLAY": "wayland-0"])
        XCTAssertFalse(wayland.ssh)
        XCTAssertFalse(wayland.headless)
        XCTAssertTrue(SessionKind(environment: ["DISPLAY": ""]).headless, "an empty DISPLAY is none")
    }
}
