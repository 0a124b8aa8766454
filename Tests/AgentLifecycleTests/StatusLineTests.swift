@testable import AgentLifecycle
@testable import AgentAccess
import XCTest

final class StatusLineTests: XCTestCase {
    func testIdleLineCountsAccounts() {
        XCTAssertEqual(StatusLine(accounts: 3, signedIn: 2).text, "Serving 3 accounts, 2 signed in")
        XCTAssertEqual(StatusLine(accounts: 1, signedIn: 0).text, "Serving 1 account, 0 signed in")
        XCTAssertEqual(StatusLine(accounts: 2).text, "Serving 2 accounts", "signed-in count unknown (keyring locked)")
    }

    func testRefreshAndSignInShowWhileTheyRun() {
        var line = StatusLine(accounts: 3, signedIn: 2)
        line.apply(.refreshStarted, account: "work")
        XCTAssertEqual(line.text, "Refreshing work")
        line.apply(.signInStarted, account: "home")
        XCTAssertEqual(line.text, "Waiting for sign-in: home; refreshing work")
        line.apply(.refreshStarted, account: "alpha")
        XCTAssertEqual(line.text, "Waiting for sign-in: home; refreshing alpha, work")
        line.apply(.refreshFinished, account: "work")
        line.apply(.refreshFinished, account: "alpha")
        XCTAssertEqual(line.text, "Waiting for sign-in: home")
        line.apply(.signInFinished, account: "home")
        XCTAssertEqual(line.text, "Serving 3 accounts, 2 signed in")
    }

    func testSignInsInMemoryOnlyAreSaidWithWhyTheAgentStays() {
        var line = StatusLine(accounts: 2, signedIn: 1)
        line.inMemory = ["work"]
        XCTAssertEqual(line.text, "Serving 2 accounts, 1 signed in; kept in memory only, so no idle exit: work")
        line.apply(.refreshStarted, account: "work")
        XCTAssertEqual(line.text, "Refreshing work; kept in memory only, so no idle exit: work")
        line.inMemory = []
        XCTAssertEqual(line.text, "Refreshing work")
    }

    func testAConfigurationProblemIsAllTheLineSays() {
        var line = StatusLine(accounts: 0)
        line.configProblem = "/home/u/.config/auth-agent/config.toml:4: unknown key 'x'"
        line.apply(.refreshStarted, account: "work")
        XCTAssertEqual(line.text, "Configuration error: /home/u/.config/auth-agent/config.toml:4: unknown key 'x'")
        line.configProblem = nil
        XCTAssertEqual(line.text, "Refreshing work")
    }
}
