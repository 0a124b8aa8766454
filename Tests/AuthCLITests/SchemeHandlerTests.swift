import AuthCLI
import XCTest

final class SchemeHandlerTests: XCTestCase {
    func testOnlyPrivateUseSchemesAreRegistered() {
        XCTAssertEqual(SchemeHandler.privateUseScheme(of: "com.example.app:/oauth2/callback/work"), "com.example.app")
        XCTAssertNil(SchemeHandler.privateUseScheme(of: "http://127.0.0.1/oauth2/callback/work"))
        XCTAssertNil(SchemeHandler.privateUseScheme(of: "https://example.com/cb"))
        XCTAssertNil(SchemeHandler.privateUseScheme(of: "com.example.app://host/cb"), "authority form")
        XCTAssertNil(SchemeHandler.privateUseScheme(of: "myapp:/cb"), "no period: not a reverse domain")
        XCTAssertNil(SchemeHandler.privateUseScheme(of: "com.example.app;x=1:/cb"))
    }

    func testDesktopEntryHandsTheURIToAuthctlCallback() {
        let entry = SchemeHandler.desktopEntry(scheme: "com.example.app", authctlPath: "/home/alice/.local/bin/authctl")
        let lines = entry.split(separator: "\n").map(String.init)
        XCTAssertEqual(lines.first, "[Desktop Entry]")
        XCTAssertTrue(lines.contains("Exec=/home/alice/.local/bin/authctl callback %u"))
        XCTAssertTrue(lines.contains("MimeType=x-scheme-handler/com.example.app;"))
        XCTAssertTrue(lines.contains("NoDisplay=true"))
        XCTAssertEqual(SchemeHandler.desktopFileName(scheme: "com.example.app"), "auth-agent-com.example.app.desktop")
    }

    func testExecQuotingFollowsTheDesktopEntrySpec() {
        XCTAssertEqual(SchemeHandler.execArgument("/usr/bin/authctl"), "/usr/bin/authctl")
        XCTAssertEqual(SchemeHandler.execArgument("/opt/my tools/authctl"), "\"/opt/my tools/authctl\"")
        XCTAssertEqual(SchemeHandler.execArgument("/opt/a$b/authctl"), "\"/opt/a\\\\$b/authctl\"")
        XCTAssertEqual(SchemeHandler.execArgument("/opt/100%/authctl"), "/opt/100%%/authctl")
    }
}
