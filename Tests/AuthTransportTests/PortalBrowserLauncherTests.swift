import AuthCore
@testable import AuthTransport
import Foundation
import Logging
import XCTest

/// The portal-first launch policy with the bus call injected (the real call is exercised end to end against a fake
/// portal on a private bus in Tests/e2e/test_portal.py).
final class PortalBrowserLauncherTests: XCTestCase {
    final class Recorder: BrowserLauncher, @unchecked Sendable {
        private let lock = NSLock()
        private var _opened: [String] = []
        var opened: [String] { lock.withLock { _opened } }
        func open(_ url: URL) throws(AuthError) { lock.withLock { _opened.append(url.absoluteString) } }
        func locate() -> BrowserLocation { BrowserLocation(program: "/usr/bin/firefox", source: "BROWSER", problem: nil) }
    }

    final class Calls: @unchecked Sendable {
        private let lock = NSLock()
        private var _uris: [String] = []
        var uris: [String] { lock.withLock { _uris } }
        func record(_ uri: String) { lock.withLock { _uris.append(uri) } }
    }

    let url = URL(string: "https://issuer.example/authorize?state=s&code_challenge_method=S256")!

    func launcher(_ outcome: PortalBrowserLauncher.Outcome, available: Bool = true) -> (PortalBrowserLauncher, Recorder, Calls) {
        let fallback = Recorder()
        let calls = Calls()
        let launcher = PortalBrowserLauncher(fallback: fallback, logger: Logger(label: "test"),
                                             call: { calls.record($0); return outcome }, available: { available })
        return (launcher, fallback, calls)
    }

    func testAPortalThatOpensTheURLIsTheOnlyLauncher() async throws {
        let (portal, fallback, calls) = launcher(.opened { .opened })
        try await portal.open(url)
        XCTAssertEqual(calls.uris, [url.absoluteString])
        XCTAssertEqual(fallback.opened, [], "the browser was started a second time")
    }

    func testNoResponseStartsTheBrowserLater() async throws {
        // The portal accepted: whatever its Response then says (the person dismissed the chooser, the portal failed),
        // nothing else opens the page once `open` has returned; authctl shows the URL.
        for response in [PortalBrowserLauncher.Response.opened, .dismissed, .failed(2), .unknown("no Response signal in time")] {
            let answered = Calls()
            let (portal, fallback, _) = launcher(.opened { answered.record("done"); return response })
            try await portal.open(url)
            for _ in 0..<2000 where answered.uris.isEmpty { try await Task.sleep(for: .milliseconds(5)) }
            XCTAssertEqual(answered.uris, ["done"], "the Response was not awaited")
            try await Task.sleep(for: .milliseconds(200))  // a late fallback would start right after the answer
            XCTAssertEqual(fallback.opened, [], "\(response) started the browser a second time")
        }
    }

    func testResponseCodes() {
        XCTAssertEqual(PortalBrowserLauncher.Response(code: 0), .opened)
        XCTAssertEqual(PortalBrowserLauncher.Response(code: 1), .dismissed)
        XCTAssertEqual(PortalBrowserLauncher.Response(code: 2), .failed(2))
        XCTAssertEqual(PortalBrowserLauncher.Response(code: -ETIMEDOUT), .unknown("no Response signal in time"))
    }

    func testAnAbsentOrFailingPortalFallsBackToTheBrowser() async throws {
        for outcome in [PortalBrowserLauncher.Outcome.absent("ServiceUnknown"), .failed("org.freedesktop.portal.Error.Failed: no")] {
            let (portal, fallback, calls) = launcher(outcome)
            try await portal.open(url)
            XCTAssertEqual(calls.uris.count, 1, "\(outcome)")
            XCTAssertEqual(fallback.opened, [url.absoluteString], "no fallback after \(outcome)")
        }
    }

    func testRefusesWhatTheExecLauncherRefusesBeforeAskingThePortal() async {
        for bad in ["http://example.com/authorize", "file:///etc/passwd", "javascript:alert(1)"] {
            let (portal, fallback, calls) = launcher(.opened { .opened })
            do {
                try await portal.open(URL(string: bad)!)
                XCTFail("opened \(bad)")
            } catch {
                XCTAssertEqual(error.code, .loginFailed)
            }
            XCTAssertEqual(calls.uris, [], "\(bad) reached the portal")
            XCTAssertEqual(fallback.opened, [])
        }
        let (portal, _, calls) = launcher(.opened { .opened })
        try? await portal.open(URL(string: "http://127.0.0.1:8000/o/authorize")!)
        XCTAssertEqual(calls.uris.count, 1, "loopback http (test servers) is allowed, as for the exec launcher")
    }

    func testLocateNamesThePortalWhenItIsThere() {
        XCTAssertEqual(launcher(.opened { .opened }, available: true).0.locate(),
                       BrowserLocation(program: "org.freedesktop.portal.Desktop", source: "xdg-desktop-portal", problem: nil))
        XCTAssertEqual(launcher(.opened { .opened }, available: false).0.locate(),
                       BrowserLocation(program: "/usr/bin/firefox", source: "BROWSER", problem: nil))
    }

    func testMicrosecondsForTheCallTimeout() {
        XCTAssertEqual(PortalBrowserLauncher.microseconds(.seconds(5)), 5_000_000)
        XCTAssertEqual(PortalBrowserLauncher.microseconds(.milliseconds(1500)), 1_500_000)
    }
}
