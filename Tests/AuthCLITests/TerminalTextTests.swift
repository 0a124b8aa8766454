import AuthCLI
import XCTest

final class TerminalTextTests: XCTestCase {
    func testEscapeSequencesBecomeVisibleAndPlainTextStays() {
        XCTAssertEqual(TerminalText.safe("no account lists evil.example/\u{1B}]0;owned\u{07}/r in its git_hosts"),
                       "no account lists evil.example/\\u{1B}]0;owned\\u{7}/r in its git_hosts")
        XCTAssertEqual(TerminalText.safe("a\u{1B}[2Jb\rc\u{7F}d\u{9B}e"), "a\\u{1B}[2Jb\\u{D}c\\u{7F}d\\u{9B}e")
        let plain = "authctl: line one\n\thint: 'work' — ünïcode stays"
        XCTAssertEqual(TerminalText.safe(plain), plain)
    }
}
