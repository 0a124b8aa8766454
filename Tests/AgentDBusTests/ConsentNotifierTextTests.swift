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

    /// Issue 46: a sandboxed app is said to be one, a "not contained" app with the holes that make it so, and both
    /// with a warning that the id is the app's own choice.
    func testASandboxedAppIsSaidToBeSandboxedOrNotContained() {
        let contained = PendingConsent(id: 5, account: "work", client: "flatpak:org.example.App",
                                       caller: WireCaller(pid: 44, via: "socket", exe: "/usr/bin/authctl",
                                                          flatpakApp: "org.example.App", flatpakInstance: "12"),
                                       since: 0, expiresIn: 60)
        XCTAssertEqual(ConsentNotifier.text(contained).summary, "Allow flatpak:org.example.App to use work?")
        XCTAssertEqual(ConsentNotifier.text(contained).body,
                       "flatpak:org.example.App (sandboxed, instance 12) (pid 44) asks for tokens of the account 'work'. "
                       + "An app chooses its own id, so another app can use the same name. "
                       + "Allow it, or run: authctl approve 5 (authctl deny 5 refuses).")
        let open = PendingConsent(id: 6, account: "work", client: "flatpak:org.example.IDE",
                                  caller: WireCaller(pid: 45, via: "dbus", exe: "/usr/bin/xdg-dbus-proxy",
                                                     flatpakApp: "org.example.IDE",
                                                     notContained: ["socket=session-bus", "filesystem=host"]),
                                  since: 0, expiresIn: 60)
        XCTAssertTrue(ConsentNotifier.text(open).body.hasPrefix(
            "flatpak:org.example.IDE (not contained: its sandbox allows socket=session-bus, filesystem=host, so it can "
            + "do what any program of yours can) (pid 45) asks"), ConsentNotifier.text(open).body)
        let host = PendingConsent(id: 7, account: "work", client: "/usr/bin/git",
                                  caller: WireCaller(pid: 46, via: "socket", exe: "/usr/bin/git"), since: 0, expiresIn: 60)
        XCTAssertFalse(ConsentNotifier.text(host).body.contains("sandbox"))
    }

    /// Issue 45: a forwarded host is asked about by name and key, with what it says runs there marked as unverified.
    func testAForwardedHostIsNamedWithItsKeyAndWhatItSaysRuns() {
        var caller = WireCaller(pid: 47, via: "ssh:build-box", exe: "/usr/bin/ssh")
        caller.hostKey = "SHA256:" + String(repeating: "A", count: 43)
        caller.remoteProgram = "/usr/bin/git"
        let request = PendingConsent(id: 8, account: "work", client: "ssh:build-box@\(caller.hostKey!)", caller: caller,
                                     since: 0, expiresIn: 60, run: "this ssh session")
        let (summary, body) = ConsentNotifier.text(request)
        XCTAssertEqual(summary, "Allow the host build-box to use work?")
        XCTAssertEqual(body, "The host build-box, reached by your ssh (host key \(caller.hostKey!)), running /usr/bin/git "
                       + "(said by the host, not verified), asks for tokens of the account 'work'. Whoever is root there "
                       + "can use them while the session lasts. Allow it, or run: authctl approve 8 (authctl deny 8 refuses). "
                       + "\"Allow this run\" (authctl approve --this-run 8) allows this ssh session only.")
        XCTAssertFalse(body.contains("pid"), "the pid is the local ssh's, not the host's")
    }
}
