@testable import AgentDBus
import AgentIPC
import XCTest

final class ConsentNotifierTextTests: XCTestCase {
    func testTheQuestionNamesTheProgramAndForARelayedRequestTheChain() {
        let direct = PendingConsent(id: 3, account: "work", client: "/usr/bin/git",
                                    caller: WireCaller(pid: 42, via: "socket", exe: "/usr/bin/git"), since: 0, expiresIn: 60)
        XCTAssertEqual(ConsentNotifier.text(direct).summary, "Allow /usr/bin/git to use work?")
        XCTAssertTrue(ConsentNotifier.text(direct).body.hasPrefix("/usr/bin/git pid 42 asks for tokens of the account 'work'."))
        let relayed = PendingConsent(id: 4, account: "mail", client: "/usr/bin/msmtp",
                                     caller: WireCaller(pid: 43, via: "socket", exe: "/usr/bin/msmtp",
                                                        relayedBy: ["/usr/bin/dash", "/usr/bin/authctl"]),
                                     since: 0, expiresIn: 60)
        XCTAssertEqual(ConsentNotifier.text(relayed).summary, "Allow /usr/bin/msmtp to use mail?")
        XCTAssertTrue(ConsentNotifier.text(relayed).body.hasPrefix(
            "/usr/bin/msmtp via dash via authctl pid 43 asks for tokens of the account 'mail'."))
        XCTAssertTrue(ConsentNotifier.text(relayed).body.contains("authctl approve 4"))
    }

    /// Issue 46: a sandboxed app is named as the agent describes it everywhere, a "not contained" app with the holes
    /// that make it so, and both with a warning that the id is the app's own choice.
    func testASandboxedAppIsSaidToBeSandboxedOrNotContained() {
        var app = WireCaller(pid: 44, via: "socket", kind: .flatpak, exe: "/usr/bin/authctl")
        (app.flatpakApp, app.flatpakInstance) = ("org.example.App", "12")
        let contained = PendingConsent(id: 5, account: "work", client: "flatpak:org.example.App", caller: app,
                                       since: 0, expiresIn: 60)
        XCTAssertEqual(ConsentNotifier.text(contained).summary, "Allow flatpak:org.example.App to use work?")
        XCTAssertEqual(ConsentNotifier.text(contained).body,
                       "flatpak:org.example.App (instance 12) /usr/bin/authctl pid 44 asks for tokens of the account 'work'. "
                       + "An app chooses its own id, so another app can use the same name. "
                       + "Allow it, or run: authctl approve 5 (authctl deny 5 refuses).")
        var ide = WireCaller(pid: 45, via: "dbus", kind: .flatpak, exe: "/usr/bin/xdg-dbus-proxy")
        (ide.flatpakApp, ide.notContained) = ("org.example.IDE", ["socket=session-bus", "filesystem=host"])
        let open = PendingConsent(id: 6, account: "work", client: "flatpak:org.example.IDE", caller: ide, since: 0, expiresIn: 60)
        XCTAssertTrue(ConsentNotifier.text(open).body.hasPrefix(
            "flatpak:org.example.IDE (not contained: socket=session-bus, filesystem=host) /usr/bin/xdg-dbus-proxy pid 45 via dbus asks"),
            ConsentNotifier.text(open).body)
        XCTAssertTrue(ConsentNotifier.text(open).body.contains("do what any program of yours can"))
        let host = PendingConsent(id: 7, account: "work", client: "/usr/bin/git",
                                  caller: WireCaller(pid: 46, via: "socket", exe: "/usr/bin/git"), since: 0, expiresIn: 60)
        XCTAssertFalse(ConsentNotifier.text(host).body.contains("sandbox"))
    }

    /// Issue 45: a forwarded host is asked about by name and key, with what it says runs there marked as unverified.
    func testAForwardedHostIsNamedWithItsKeyAndWhatItSaysRuns() {
        var caller = WireCaller(pid: 47, via: "ssh:build-box", kind: .sshHost, exe: "/usr/bin/ssh")
        (caller.host, caller.hostKey) = ("build-box", "SHA256:" + String(repeating: "A", count: 43))
        caller.remoteProgram = "/usr/bin/git"
        let request = PendingConsent(id: 8, account: "work", client: "ssh:build-box@\(caller.hostKey!)", caller: caller,
                                     since: 0, expiresIn: 60, run: "this ssh session")
        let (summary, body) = ConsentNotifier.text(request)
        XCTAssertEqual(summary, "Allow the host build-box to use work?")
        XCTAssertEqual(body, "host build-box over ssh (host key \(caller.hostKey!)) running /usr/bin/git "
                       + "(said by the host, not verified) asks for tokens of the account 'work'. Whoever is root there "
                       + "can use them while the session lasts. Allow it, or run: authctl approve 8 (authctl deny 8 refuses). "
                       + "\"Allow this run\" (authctl approve --this-run 8) allows this ssh session only.")
        XCTAssertFalse(body.contains("pid"), "the pid is the local ssh's, not the host's")
    }

    /// Issue 54: a host allowed before under another key is asked about saying its key changed, from which to which.
    func testAHostWhoseKeyChangedIsAskedAboutSayingSo() {
        let (old, new) = ("SHA256:" + String(repeating: "A", count: 43), "SHA256:" + String(repeating: "B", count: 43))
        var caller = WireCaller(pid: 47, via: "ssh:build-box", kind: .sshHost, exe: "/usr/bin/ssh")
        (caller.host, caller.hostAlias, caller.hostKey) = ("127.0.0.1:22022", "build-box", new)
        let request = PendingConsent(id: 8, account: "work", client: "ssh:build-box@\(new)", caller: caller,
                                     since: 0, expiresIn: 60, run: "this ssh session", previousHostKey: old)
        let (summary, body) = ConsentNotifier.text(request)
        XCTAssertEqual(summary, "Allow the host build-box, whose host key changed, to use work?")
        XCTAssertTrue(body.contains("asks for tokens of the account 'work'. Its host key changed: you allowed build-box "
                                    + "before with host key \(old), and it now presents \(new). Allow it only if you expected "
                                    + "the change (the host was reinstalled or its key replaced); if not, someone else may "
                                    + "answer as build-box. Whoever is root there"), body)
        var first = request
        first.previousHostKey = nil
        XCTAssertFalse(ConsentNotifier.text(first).body.contains("changed"), "a host never allowed before is just asked about")
    }

    /// Issue 53, hole 6: the body is markup to notification servers: what a caller chose is escaped there, and
    /// carries no control, format or bidi character.
    func testWhatACallerChoseIsEscapedInTheBody() {
        var caller = WireCaller(pid: 48, via: "ssh:h", kind: .sshHost, exe: "/usr/bin/ssh")
        (caller.host, caller.hostKey) = ("h", "SHA256:" + String(repeating: "A", count: 43))
        caller.remoteProgram = "<a href=\"https://evil\">click</a>\u{2029}\u{202E}fake row\n"
        let body = ConsentNotifier.text(PendingConsent(id: 9, account: "work", client: "ssh:h@x", caller: caller,
                                                       since: 0, expiresIn: 60)).body
        XCTAssertTrue(body.contains("&lt;a href=\"https://evil\"&gt;click&lt;/a&gt;\u{FFFD}\u{FFFD}fake row\u{FFFD}"), body)
        XCTAssertFalse(body.contains("<") || body.unicodeScalars.contains { [0x0A, 0x2029, 0x202E].contains($0.value) }, body)
    }
}
