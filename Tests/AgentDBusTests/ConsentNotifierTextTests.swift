@testable import AgentDBus
import AgentIPC
import XCTest

final class ConsentNotifierTextTests: XCTestCase {
    func testTheQuestionNamesTheProgramAndForARelayedRequestTheChain() {
        let direct = PendingConsent(id: 3, account: "work", client: "/usr/bin/git",
                                    caller: WireCaller(pid: 42, via: "socket", exe: "/usr/bin/git"), since: 0, expiresIn: 60)
        XCTAssertEqual(ConsentNotifier.text(direct).summary, "Allow /usr/bin/git to use work?")
        XCTAssertTrue(ConsentNotifier.text(direct).body.hasPrefix("/usr/bin/git (pid 42) asks for tokens of the account 'work'."))
        let relayed = PendingConsent(id: 4, account: "mail", client: "/usr/bin/msmtp",
                                     caller: WireCaller(pid: 43, via: "socket", exe: "/usr/bin/msmtp",
                                                        relayedBy: ["/usr/bin/dash", "/usr/bin/authctl"]),
                                     since: 0, expiresIn: 60)
        XCTAssertEqual(ConsentNotifier.text(relayed).summary, "Allow /usr/bin/msmtp to use mail?")
        XCTAssertTrue(ConsentNotifier.text(relayed).body.hasPrefix(
            "/usr/bin/msmtp via dash via authctl (pid 43) asks for tokens of the account 'mail'."))
        XCTAssertTrue(ConsentNotifier.text(relayed).body.contains("authctl approve 4"))
    }
}
