import AgentIPC
import AuthCLI
import XCTest

final class AuditFormatTests: XCTestCase {
    func caller(_ kind: WireCaller.Kind, pid: Int32 = 7, via: String = "socket", exe: String?,
                _ fill: (inout WireCaller) -> Void = { _ in }) -> WireCaller {
        var caller = WireCaller(pid: pid, via: via, kind: kind, exe: exe)
        fill(&caller)
        return caller
    }

    func testRowNamesTheCallerAndNeverMoreThanTheRecordHolds() {
        let entry = AuditEntry(time: 1_700_000_000, account: "work", outcome: "denied", reason: "not_listed",
                               scopes: ["read", "write"], resource: "https://api.example/",
                               caller: WireCaller(pid: 4242, via: "dbus", exe: "/home/u/bin/tool", exeDeleted: true,
                                                  unit: "app-gnome-tool-1.scope"))
        XCTAssertEqual(AuditFormat.row(entry), [
            "2023-11-14T22:13:20Z", "work", "denied (not_listed)", "scopes=read,write resource=https://api.example/",
            "/home/u/bin/tool (deleted) unit:app-gnome-tool-1.scope pid 4242 via dbus",
        ])
        let app = caller(.flatpak, exe: "/app/bin/evolution") { $0.flatpakApp = "org.gnome.Evolution" }
        XCTAssertEqual(AuditFormat.who(app), "flatpak:org.gnome.Evolution /app/bin/evolution pid 7")
        // A request relayed by authctl: the program behind it, then the relay (as the agent's messages say it).
        let relayed = WireCaller(pid: 9, via: "socket", exe: "/usr/bin/msmtp", relayedBy: ["/usr/bin/dash", "/usr/bin/authctl"])
        XCTAssertEqual(AuditFormat.who(relayed), "/usr/bin/msmtp via dash via authctl pid 9")
        let unknown = WireCaller(pid: 9, via: "socket", exe: nil, relayedBy: ["/usr/bin/authctl"])
        XCTAssertEqual(AuditFormat.who(unknown), "an unknown executable via authctl pid 9")
        let container = caller(.container, pid: 11, exe: "/usr/bin/git") { $0.unit = "libpod-0123.scope" }
        XCTAssertEqual(AuditFormat.who(container), "a container (a pid namespace of its own) running /usr/bin/git unit:libpod-0123.scope pid 11")
        let toolbox = caller(.hostContainer, pid: 12, exe: "/usr/bin/git")
        XCTAssertEqual(AuditFormat.who(toolbox), "/usr/bin/git (in a root directory of its own) pid 12")
        let open = caller(.flatpak, pid: 13, via: "dbus", exe: "/usr/bin/xdg-dbus-proxy") {
            ($0.flatpakApp, $0.flatpakInstance) = ("org.example.IDE", "77")
            $0.notContained = ["socket=session-bus", "talk-name=org.freedesktop.Flatpak"]
        }
        XCTAssertEqual(AuditFormat.who(open), "flatpak:org.example.IDE (instance 77) (not contained: socket=session-bus, "
                       + "talk-name=org.freedesktop.Flatpak) /usr/bin/xdg-dbus-proxy pid 13 via dbus")
        let faked = caller(.unidentified, pid: 14, exe: "/usr/bin/authctl") {
            ($0.flatpakApp, $0.unidentified) = ("org.example.App", "its pid namespace 1 is not instance 78's (2)")
        }
        XCTAssertEqual(AuditFormat.who(faked), "an unidentified sandbox (its pid namespace 1 is not instance 78's (2)) "
                       + "claiming flatpak:org.example.App showing /usr/bin/authctl pid 14")
        let host = caller(.sshHost, pid: 15, via: "ssh:build-box", exe: "/usr/bin/ssh") {
            ($0.host, $0.hostKey, $0.remoteProgram, $0.unit) = ("build-box", "SHA256:k", "/usr/bin/git", "deploy.service")
        }
        XCTAssertEqual(AuditFormat.who(host), "host build-box over ssh (host key SHA256:k) running /usr/bin/git (said by the host, not verified) local ssh pid 15 via ssh:build-box",
                       "the local ssh's unit is not the host's")
    }

    /// Issue 53, hole 6: whatever a caller chose is shown with no control, format or bidi character and capped, so
    /// it cannot forge rows or reorder what people read.
    func testNamesACallerChoseAreShownSafely() {
        let host = caller(.sshHost, via: "ssh:h", exe: "/usr/bin/ssh") {
            ($0.host, $0.hostKey) = ("h", "SHA256:k")
            $0.remoteProgram = "/usr/bin/git\n2026-01-01T00:00:00Z  work  granted (listed)\u{2029}\u{202E}txt.exe\u{200B}<b>x</b>"
                + String(repeating: "y", count: 500)
        }
        let words = AuditFormat.who(host)
        XCTAssertFalse(words.unicodeScalars.contains { [0x0A, 0x2029, 0x202E, 0x200B].contains($0.value) }, words)
        XCTAssertTrue(words.contains("/usr/bin/git\u{FFFD}2026-01-01"), words)
        XCTAssertLessThan(words.count, WireCaller.shownLimit + 200, "capped")
        let entry = AuditEntry(time: 0, account: "work\u{202E}", outcome: "granted", reason: "open", caller: host)
        XCTAssertEqual(AuditFormat.row(entry)[1], "work\u{FFFD}")
    }

    func testAClippedRecordSaysSo() {
        let caller = WireCaller(pid: 3, via: "socket", exe: "/usr/bin/curl")
        let entry = AuditEntry(time: 1_700_000_000, account: "work", outcome: "denied", reason: "not_listed",
                               scopes: ["aaa…"], caller: caller, clipped: true)
        XCTAssertEqual(AuditFormat.row(entry)[3], "scopes=aaa… (clipped)")
        XCTAssertEqual(AuditFormat.row(AuditEntry(time: 0, account: "w", outcome: "granted", reason: "open", caller: caller,
                                                  clipped: true))[3], "(clipped)")
    }
}
