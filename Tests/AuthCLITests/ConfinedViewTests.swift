import AgentIPC
@testable import AuthCLI
import XCTest

/// Issue 54: on a host reached through `authctl forward`, `doctor` failed (`fail diagnose`, exit 1) with hints that
/// cannot work there (`authctl login --no-browser`, `authctl accounts add`). There it says what the host is to the
/// agent, which accounts it may use and what to do, from `status` alone.
final class ConfinedViewTests: XCTestCase {
    func status(view: String?, namedBy: String?, accounts: [StatusResult.Account]) -> StatusResult {
        StatusResult(agent: .init(version: "0.1.0", pid: nil, uptimeSeconds: 5, socket: nil, keyring: nil, hostname: "desk-1"),
                     accounts: accounts, view: view, namedBy: namedBy)
    }

    func account(_ name: String, signedIn: Bool?) -> StatusResult.Account {
        .init(name: name, issuer: "https://issuer.example", clientID: "c", redirectURI: "http://127.0.0.1/cb", scopes: [],
              signedIn: signedIn, accessTokenExpiresAt: nil, accessTokenExpiresIn: nil, lastRefresh: nil, lastError: nil,
              loginPending: false)
    }

    func testDoctorOnAHostSaysWhatItIsWhichAccountsItMayUseAndWhatToDo() throws {
        let shown = status(view: "ssh_host", namedBy: "ssh:build-box",
                           accounts: [account("work", signedIn: true), account("fresh", signedIn: false)])
        let view = try XCTUnwrap(ConfinedView(shown))
        let report = DoctorReport(checks: view.doctorChecks(shown, account: nil))
        XCTAssertTrue(report.ok, "nothing on the host failed: \(report.checks)")
        XCTAssertEqual(report.checks.map(\.check), ["view", "tokens", "tokens", "desktop"])
        XCTAssertEqual(report.checks[0].message,
                       "a host reached through `authctl forward` from desk-1, named ssh:build-box in allowed_clients")
        XCTAssertEqual(report.checks[1].message, "signed in; `authctl token work` gets its tokens here")
        XCTAssertEqual(report.checks[2].status, .warn)
        XCTAssertEqual(report.checks[2].hint, "sign in on desk-1 (the computer where the agent runs): `authctl login fresh`")
        let said = report.checks.map { $0.message + ($0.hint ?? "") }.joined()
        XCTAssertFalse(said.contains("--no-browser") || said.contains("accounts add") || said.contains("diagnose"), said)
    }

    func testAHostNoAccountServesIsToldWhichEntryWouldAndAnAppIsNamedAsAnApp() throws {
        let none = status(view: "ssh_host", namedBy: "ssh:build-box", accounts: [])
        let checks = try XCTUnwrap(ConfinedView(none)).doctorChecks(none, account: nil)
        let accounts = try XCTUnwrap(checks.first { $0.check == "accounts" })
        XCTAssertEqual(accounts.status, .warn)
        XCTAssertEqual(accounts.message, "no account serves this host now")
        XCTAssertTrue(accounts.hint?.contains("list \"ssh:build-box\" in an account's allowed_clients") == true, accounts.hint ?? "")

        let app = try XCTUnwrap(ConfinedView(status(view: "flatpak", namedBy: "flatpak:org.example.App", accounts: [])))
        XCTAssertEqual(app.summary, "an app inside its Flatpak sandbox, named flatpak:org.example.App in allowed_clients")
        XCTAssertEqual(app.itself, "this app")
    }

    func testTheDesktopAndAnOlderAgentAreNotAConfinedView() {
        XCTAssertNil(ConfinedView(status(view: "desktop", namedBy: nil, accounts: [])))
        XCTAssertNil(ConfinedView(status(view: "host_container", namedBy: nil, accounts: [])))
        XCTAssertNil(ConfinedView(status(view: nil, namedBy: nil, accounts: [])), "an agent older than `view`")
        XCTAssertNotNil(ConfinedView(status(view: "some_future_kind", namedBy: nil, accounts: [])), "unknown: confined")
    }
}
