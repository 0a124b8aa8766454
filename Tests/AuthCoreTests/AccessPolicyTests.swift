import AuthCore
import XCTest

final class AccessPolicyTests: XCTestCase {
    func rule(_ text: String) throws -> ClientRule { try ClientRule.parse(text).get() }

    func testEntriesParseInExactlyThreeForms() throws {
        XCTAssertEqual(try rule("/usr/bin/git"), .path("/usr/bin/git"))
        XCTAssertEqual(try rule("unit:mbsync.service"), .unit("mbsync.service"))
        XCTAssertEqual(try rule("unit:app-gnome-org.gnome.Evolution-4242.scope"), .unit("app-gnome-org.gnome.Evolution-4242.scope"))
        XCTAssertEqual(try rule("flatpak:org.gnome.Evolution"), .flatpak("org.gnome.Evolution"))
        XCTAssertEqual(try rule("/usr/bin/git").description, "/usr/bin/git")
        XCTAssertEqual(try rule("unit:mbsync.service").description, "unit:mbsync.service")
    }

    func testGlobsRelativeAndUnnormalisedEntriesAreRefused() {
        for bad in ["/usr/bin/*", "/usr/bin/g?t", "git", "./git", "/usr/bin/", "/usr//bin/git", "/usr/bin/../bin/git",
                    "/usr/./bin/git", "unit:mbsync", "unit:*.service", "unit:", "unit:a b.service", "flatpak:evolution",
                    "flatpak:org.gnome", "flatpak:org.1gnome.App", "flatpak:org.gnome.Evo lution", "", "exe:/usr/bin/git"] {
            XCTAssertThrowsError(try ClientRule.parse(bad).get(), "'\(bad)' must be refused")
        }
    }

    func testPathRuleMatchesOnlyThatExecutableWhileItIsNotDeletedAndNotSandboxed() throws {
        let git = try rule("/usr/bin/git")
        XCTAssertTrue(git.matches(ClientIdentity(exe: "/usr/bin/git")))
        XCTAssertTrue(git.matches(ClientIdentity(exe: "/usr/bin/git", unit: "session-2.scope")))
        XCTAssertFalse(git.matches(ClientIdentity(exe: "/usr/bin/git", exeDeleted: true)), "a deleted or replaced binary must not match")
        XCTAssertFalse(git.matches(ClientIdentity(exe: "/usr/bin/git2")))
        XCTAssertFalse(git.matches(ClientIdentity(exe: "/usr/bin/gi")))
        XCTAssertFalse(git.matches(ClientIdentity(exe: "/tmp/usr/bin/git")))
        XCTAssertFalse(git.matches(ClientIdentity(exe: nil)))
        XCTAssertFalse(git.matches(ClientIdentity(exe: "/usr/bin/git", flatpakApp: "org.evil.App")),
                       "a path inside a sandbox is the sandbox's own")
        XCTAssertFalse(git.matches(ClientIdentity(exe: "/usr/bin/git", ownPIDNamespace: true)),
                       "in a pid namespace of its own another process may have written the request")
    }

    func testUnitAndFlatpakRulesMatchExactly() throws {
        let unit = try rule("unit:mbsync.service")
        XCTAssertTrue(unit.matches(ClientIdentity(exe: "/usr/bin/mbsync", unit: "mbsync.service")))
        XCTAssertFalse(unit.matches(ClientIdentity(exe: "/usr/bin/mbsync", unit: "mbsync2.service")))
        XCTAssertFalse(unit.matches(ClientIdentity(exe: "/usr/bin/mbsync")))
        let app = try rule("flatpak:org.gnome.Evolution")
        XCTAssertTrue(app.matches(ClientIdentity(exe: "/app/bin/evolution", flatpakApp: "org.gnome.Evolution")))
        XCTAssertFalse(app.matches(ClientIdentity(exe: "/app/bin/evolution", flatpakApp: "org.gnome.Evolution.Devel")))
        XCTAssertFalse(app.matches(ClientIdentity(exe: "/usr/bin/evolution")))
    }

    func testDecisionTable() throws {
        let git = ClientIdentity(exe: "/usr/bin/git")
        let curl = ClientIdentity(exe: "/usr/bin/curl")
        let deleted = ClientIdentity(exe: "/home/u/bin/tool", exeDeleted: true)

        XCTAssertEqual(AccessPolicy.open.decide(curl, remembered: false), .grant(.open), "no policy: today's behaviour")
        XCTAssertEqual(AccessPolicy.open.decide(deleted, remembered: nil), .grant(.open))

        let listed = AccessPolicy(allowedClients: [try rule("/usr/bin/git")])
        XCTAssertEqual(listed.decide(git, remembered: nil), .grant(.listed))
        XCTAssertEqual(listed.decide(curl, remembered: nil), .deny(.notListed))
        XCTAssertEqual(listed.decide(curl, remembered: true), .deny(.notListed), "without confirm, a decision cannot widen the list")
        XCTAssertEqual(listed.decide(deleted, remembered: nil), .deny(.unidentified))

        let empty = AccessPolicy(allowedClients: [])
        XCTAssertEqual(empty.decide(git, remembered: nil), .deny(.notListed))

        let ask = AccessPolicy(allowedClients: [try rule("/usr/bin/git")], confirm: .firstUse)
        XCTAssertEqual(ask.decide(git, remembered: nil), .grant(.listed), "listed callers are not asked")
        XCTAssertEqual(ask.decide(curl, remembered: nil), .ask)
        XCTAssertEqual(ask.decide(curl, remembered: true), .grant(.approved))
        XCTAssertEqual(ask.decide(curl, remembered: false), .deny(.deniedByUser))
        XCTAssertEqual(ask.decide(deleted, remembered: nil), .deny(.unidentified), "an unnameable caller is not even asked about")
        let namespaced = ClientIdentity(exe: "/usr/bin/git", ownPIDNamespace: true)
        XCTAssertNil(namespaced.consentKey)
        XCTAssertEqual(listed.decide(namespaced, remembered: nil), .deny(.unidentified))
        XCTAssertEqual(ask.decide(namespaced, remembered: nil), .deny(.unidentified))

        let askAll = AccessPolicy(confirm: .firstUse)
        XCTAssertEqual(askAll.decide(git, remembered: nil), .ask)
        XCTAssertEqual(askAll.decide(ClientIdentity(exe: nil), remembered: nil), .deny(.unidentified))
    }

    /// Issue 46: a sandboxed caller is never served by an account's default "any program of yours"; it gets an
    /// account through a `flatpak:` entry or the user's consent. Host programs: nothing changes.
    func testASandboxedCallerIsAskedNotServedByAnAccountWithoutAPolicy() throws {
        let app = ClientIdentity(exe: "/app/bin/mail", flatpakApp: "org.example.Mail")
        let host = ClientIdentity(exe: "/usr/bin/git")
        XCTAssertEqual(AccessPolicy.open.decide(host, remembered: nil), .grant(.open))
        XCTAssertEqual(AccessPolicy.open.decide(app, remembered: nil), .ask)
        XCTAssertEqual(AccessPolicy.open.decide(app, remembered: true), .grant(.approved))
        XCTAssertEqual(AccessPolicy.open.decide(app, remembered: false), .deny(.deniedByUser))
        XCTAssertTrue(AccessPolicy.open.mayAsk(app))
        XCTAssertFalse(AccessPolicy.open.mayAsk(host), "a host caller of an open account never waits for a person")

        let byApp = AccessPolicy(allowedClients: [try rule("flatpak:org.example.Mail")])
        XCTAssertEqual(byApp.decide(app, remembered: nil), .grant(.listed))
        let byPath = AccessPolicy(allowedClients: [try rule("/app/bin/mail"), try rule("/usr/bin/git")])
        XCTAssertEqual(byPath.decide(app, remembered: nil), .deny(.notListed), "its paths are the sandbox's own")
        XCTAssertEqual(byPath.decide(app, remembered: true), .deny(.notListed), "no confirm: a list not naming it refuses")
        XCTAssertFalse(byPath.mayAsk(app))
        XCTAssertEqual(AccessPolicy(confirm: .firstUse).decide(app, remembered: nil), .ask)
    }

    /// Issue 46: a caller in a root of its own that names no app (no readable `/.flatpak-info`) shows paths that are
    /// the sandbox's own and may imitate the host's: no path or decision names it, and every account
    /// refuses it unless a `unit:` entry names it (a service systemd runs in a root of its own).
    /// A root of its own that names no app (a container, a bwrap a host program made) is named by no path or decision;
    /// the agent serves it only where it serves any process of yours. A root it cannot read at all may be a sandbox
    /// (a setuid bwrap's): never served by "any process of yours" either.
    func testASandboxThatNamesNoAppIsUnidentifiedEverywhere() throws {
        let container = ClientIdentity(exe: "/usr/bin/git", unnamedSandbox: true)
        XCTAssertFalse(container.isSandboxed)
        XCTAssertNil(container.policyExe)
        XCTAssertNil(container.consentKey)
        XCTAssertFalse(try rule("/usr/bin/git").matches(container), "a contained /usr/bin/git imitates the host's")
        XCTAssertEqual(AccessPolicy.open.decide(container, remembered: nil), .grant(.open),
                       "a readable root is a host process's doing, trusted like any process of yours")
        XCTAssertEqual(AccessPolicy(allowedClients: [try rule("/usr/bin/git")]).decide(container, remembered: nil),
                       .deny(.unidentified))
        let unnamed = ClientIdentity(exe: "/usr/bin/git", rootUnreadable: true)
        XCTAssertTrue(unnamed.isSandboxed)
        XCTAssertTrue(unnamed.unnamedSandbox)
        XCTAssertNil(unnamed.policyExe)
        XCTAssertNil(unnamed.consentKey)
        XCTAssertTrue(unnamed.summary.contains("(sandbox naming no app)"), unnamed.summary)
        XCTAssertFalse(try rule("/usr/bin/git").matches(unnamed), "a sandboxed /usr/bin/git imitates the host's")
        XCTAssertEqual(AccessPolicy.open.decide(unnamed, remembered: nil), .deny(.unidentified))
        XCTAssertEqual(AccessPolicy(allowedClients: [try rule("/usr/bin/git")]).decide(unnamed, remembered: nil),
                       .deny(.unidentified))
        XCTAssertEqual(AccessPolicy(confirm: .firstUse).decide(unnamed, remembered: true), .deny(.unidentified))
        XCTAssertFalse(ClientIdentity(exe: "/usr/bin/git").isSandboxed)
        let service = ClientIdentity(exe: "/usr/bin/backup", unit: "backup.service", unnamedSandbox: true)
        XCTAssertEqual(AccessPolicy(allowedClients: [try rule("unit:backup.service")]).decide(service, remembered: nil),
                       .grant(.listed), "its unit is the host's fact, not the sandbox's")
    }

    /// Issue 46: an app whose `/.flatpak-info` names an instance whose namespaces are not its own is not believed: no
    /// `flatpak:` entry, decision or open account serves it. A "not contained" app is judged like any other app (the
    /// holes are shown, not a policy of their own).
    func testAnAppNotInTheInstanceItNamesIsUnidentifiedEverywhere() throws {
        let faked = ClientIdentity(exe: "/app/bin/mail", flatpakApp: "org.example.Mail", flatpakInstance: "42",
                                   instanceMismatch: "its pid namespace 5 is not instance 42's (6)")
        XCTAssertTrue(faked.isSandboxed)
        XCTAssertNil(faked.consentKey)
        XCTAssertNil(faked.policyFlatpakApp)
        XCTAssertFalse(try rule("flatpak:org.example.Mail").matches(faked))
        XCTAssertEqual(AccessPolicy.open.decide(faked, remembered: nil), .deny(.unidentified))
        XCTAssertEqual(AccessPolicy(allowedClients: [try rule("flatpak:org.example.Mail")]).decide(faked, remembered: nil),
                       .deny(.unidentified))
        XCTAssertEqual(AccessPolicy(confirm: .firstUse).decide(faked, remembered: true), .deny(.unidentified))
        XCTAssertEqual(faked.summary, "flatpak:org.example.Mail (instance 42) (not that instance: its pid namespace 5 is not instance 42's (6)) /app/bin/mail")

        let open = ClientIdentity(exe: "/app/bin/ide", flatpakApp: "org.example.IDE", flatpakInstance: "7",
                                  sandboxHoles: ["socket=session-bus", "filesystem=host"])
        XCTAssertTrue(open.isNotContained)
        XCTAssertEqual(open.summary, "flatpak:org.example.IDE (instance 7) (not contained: socket=session-bus, filesystem=host) /app/bin/ide")
        XCTAssertEqual(open.consentKey, "flatpak:org.example.IDE")
        XCTAssertEqual(AccessPolicy.open.decide(open, remembered: nil), .ask)
        XCTAssertEqual(AccessPolicy(allowedClients: [try rule("flatpak:org.example.IDE")]).decide(open, remembered: nil), .grant(.listed))
        XCTAssertFalse(ClientIdentity(exe: "/app/bin/mail", flatpakApp: "org.example.Mail").isNotContained)
    }

    func testConsentKeyNamesTheAppOrTheExecutable() {
        XCTAssertEqual(ClientIdentity(exe: "/usr/bin/git", unit: "x.service").consentKey, "/usr/bin/git")
        XCTAssertEqual(ClientIdentity(exe: "/app/bin/evolution", flatpakApp: "org.gnome.Evolution").consentKey, "flatpak:org.gnome.Evolution")
        XCTAssertNil(ClientIdentity(exe: "/usr/bin/git", exeDeleted: true).consentKey)
        XCTAssertNil(ClientIdentity(exe: nil).consentKey)
    }

    func testSummaryForStatus() throws {
        XCTAssertEqual(AccessPolicy.open.summary, "any process of yours (no allowed_clients); sandboxed apps are asked, and so are forwarded hosts")
        XCTAssertEqual(AccessPolicy(allowedClients: [try rule("/usr/bin/git"), try rule("unit:mbsync.service")]).summary,
                       "only /usr/bin/git, unit:mbsync.service")
        XCTAssertEqual(AccessPolicy(allowedClients: [try rule("/usr/bin/git")], confirm: .firstUse).summary,
                       "/usr/bin/git; asks others on first use")
    }

    /// Paths (and unit names) are bytes: a canonically equivalent but byte-different spelling (precomposed `é`
    /// against `e` + combining acute; the Kelvin sign against `K`) names another file or unit, so it must not
    /// match, although Swift's `String ==` calls the spellings equal.
    func testPathsAndNamesAreComparedAsBytesNotAsUnicodeText() throws {
        let precomposed = "/opt/caf\u{00E9}/bin/tool"
        let decomposed = "/opt/cafe\u{0301}/bin/tool"
        XCTAssertEqual(precomposed, decomposed, "the premise: String == uses canonical equivalence")
        XCTAssertNotEqual(Array(precomposed.utf8), Array(decomposed.utf8))
        let rule = try ClientRule.parse(precomposed).get()
        XCTAssertTrue(rule.matches(ClientIdentity(exe: precomposed)))
        XCTAssertFalse(rule.matches(ClientIdentity(exe: decomposed)), "a byte-different path matched")
        let policy = AccessPolicy(allowedClients: [rule])
        XCTAssertEqual(policy.decide(ClientIdentity(exe: decomposed), remembered: nil), .deny(.notListed))

        let unit = try ClientRule.parse("unit:backup.service").get()
        XCTAssertTrue(unit.matches(ClientIdentity(exe: nil, unit: "backup.service")))
        XCTAssertFalse(unit.matches(ClientIdentity(exe: nil, unit: "bac\u{212A}up.service")), "the Kelvin sign passed for K")
    }
}
