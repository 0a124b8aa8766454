import AgentIPC
import AuthCLI
import XCTest

final class AuditFormatTests: XCTestCase {
    func testRowNamesTheCallerAndNeverMoreThanTheRecordHolds() {
        let entry = AuditEntry(time: 1_700_000_000, account: "work", outcome: "denied", reason: "not_listed",
                               scopes: ["read", "write"], resource: "https://api.example/",
                               caller: WireCaller(pid: 4242, via: "dbus", exe: "/home/u/bin/tool", exeDeleted: true,
                                                  unit: "app-gnome-tool-1.scope"))
        XCTAssertEqual(AuditFormat.row(entry), [
            "2023-11-14T22:13:20Z", "work", "denied (not_listed)", "scopes=read,write resource=https://api.example/",
            "/home/u/bin/tool (deleted) unit:app-gnome-tool-1.scope pid 4242 via dbus",
        ])
        let app = WireCaller(pid: 7, via: "socket", exe: "/app/bin/evolution", flatpakApp: "org.gnome.Evolution")
        XCTAssertEqual(AuditFormat.who(app), "flatpak:org.gnome.Evolution /app/bin/evolution pid 7")
        // A request relayed by authctl: the program behind it, then the relay (as the agent's messages say it).
        let relayed = WireCaller(pid: 9, via: "socket", exe: "/usr/bin/msmtp", relayedBy: ["/usr/bin/dash", "/usr/bin/authctl"])
        XCTAssertEqual(AuditFormat.who(relayed), "/usr/bin/msmtp via dash via authctl pid 9")
        let unknown = WireCaller(pid: 9, via: "socket", exe: nil, relayedBy: ["/usr/bin/authctl"])
        XCTAssertEqual(AuditFormat.who(unknown), "? via authctl pid 9")
        let namespaced = WireCaller(pid: 11, via: "socket", exe: "/usr/bin/git", ownPIDNamespace: true)
        XCTAssertEqual(AuditFormat.who(namespaced), "/usr/bin/git (own pid namespace) pid 11")
        let unnamed = WireCaller(pid: 12, via: "socket", exe: "/usr/bin/git", unnamedSandbox: true, ownPIDNamespace: true)
        XCTAssertEqual(AuditFormat.who(unnamed), "/usr/bin/git (sandbox naming no app) (own pid namespace) pid 12")
        let open = WireCaller(pid: 13, via: "dbus", exe: "/usr/bin/xdg-dbus-proxy", flatpakApp: "org.example.IDE",
                              flatpakInstance: "77", notContained: ["socket=session-bus", "talk-name=org.freedesktop.Flatpak"])
        XCTAssertEqual(AuditFormat.who(open), "flatpak:org.example.IDE (instance 77) (not contained: socket=session-bus, "
                       + "talk-name=org.freedesktop.Flatpak) /usr/bin/xdg-dbus-proxy pid 13 via dbus")
        let faked = WireCaller(pid: 14, via: "socket", exe: "/usr/bin/authctl", flatpakApp: "org.example.App",
                               flatpakInstance: "78", instanceMismatch: "its pid namespace 1 is not instance 78's (2)")
        XCTAssertEqual(AuditFormat.who(faked), "flatpak:org.example.App (instance 78) (not that instance: its pid "
                       + "namespace 1 is not instance 78's (2)) /usr/bin/authctl pid 14")
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
