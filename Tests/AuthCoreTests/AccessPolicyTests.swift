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
        XCTAssertFalse(git.matches(ClientIdentity(.flatpak(.init(id: "org.evil.App")), exe: "/usr/bin/git")),
                       "a path inside a sandbox is the sandbox's own")
        XCTAssertFalse(git.matches(ClientIdentity(.container, exe: "/usr/bin/git")),
                       "in a pid namespace of its own another process may have written the request")
        XCTAssertFalse(git.matches(ClientIdentity(.hostContainer, exe: "/usr/bin/git")), "a root of its own has its own paths")
    }

    func testUnitAndFlatpakRulesMatchExactly() throws {
        let unit = try rule("unit:mbsync.service")
        XCTAssertTrue(unit.matches(ClientIdentity(exe: "/usr/bin/mbsync", unit: "mbsync.service")))
        XCTAssertFalse(unit.matches(ClientIdentity(exe: "/usr/bin/mbsync", unit: "mbsync2.service")))
        XCTAssertFalse(unit.matches(ClientIdentity(exe: "/usr/bin/mbsync")))
        let app = try rule("flatpak:org.gnome.Evolution")
        XCTAssertTrue(app.matches(ClientIdentity(.flatpak(.init(id: "org.gnome.Evolution")), exe: "/app/bin/evolution")))
        XCTAssertFalse(app.matches(ClientIdentity(.flatpak(.init(id: "org.gnome.Evolution.Devel")), exe: "/app/bin/evolution")))
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
        let namespaced = ClientIdentity(.container, exe: "/usr/bin/git")
        XCTAssertNil(namespaced.consentKey, "a container without a unit cannot be named")
        XCTAssertEqual(listed.decide(namespaced, remembered: nil), .deny(.unidentified))
        XCTAssertEqual(ask.decide(namespaced, remembered: nil), .deny(.unidentified))

        let askAll = AccessPolicy(confirm: .firstUse)
        XCTAssertEqual(askAll.decide(git, remembered: nil), .ask)
        XCTAssertEqual(askAll.decide(ClientIdentity(exe: nil), remembered: nil), .deny(.unidentified))
    }

    /// Issue 46: a sandboxed caller is never served by an account's default "any program of yours"; it gets an
    /// account through a `flatpak:` entry or the user's consent. Host programs: nothing changes.
    func testASandboxedCallerIsAskedNotServedByAnAccountWithoutAPolicy() throws {
        let app = ClientIdentity(.flatpak(.init(id: "org.example.Mail")), exe: "/app/bin/mail")
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

    /// Issue 53: a caller is one kind, and what it may do is its kind's. A root of its own in the agent's pid
    /// namespace (toolbox) is host code: served where any process of yours is, named by its unit only. A pid
    /// namespace of its own (podman, docker) is confined: asked by an open account, named by the unit the host gave
    /// it, refused when it has none. A caller the agent cannot read is confined and named by nothing.
    func testEachKindIsNamedAndServedByItsOwnRule() throws {
        let toolbox = ClientIdentity(.hostContainer, exe: "/usr/bin/git", unit: "toolbox-1.scope")
        XCTAssertFalse(toolbox.isConfined)
        XCTAssertNil(toolbox.policyExe)
        XCTAssertNil(toolbox.consentKey)
        XCTAssertFalse(try rule("/usr/bin/git").matches(toolbox), "a contained /usr/bin/git imitates the host's")
        XCTAssertTrue(try rule("unit:toolbox-1.scope").matches(toolbox))
        XCTAssertEqual(AccessPolicy.open.decide(toolbox, remembered: nil), .grant(.open))
        XCTAssertEqual(AccessPolicy(allowedClients: [try rule("/usr/bin/git")]).decide(toolbox, remembered: nil), .deny(.unidentified))

        let container = ClientIdentity(.container, exe: "/usr/bin/git", unit: "libpod-0123.scope")
        XCTAssertTrue(container.isConfined)
        XCTAssertNil(container.policyExe)
        XCTAssertEqual(container.consentKey, "unit:libpod-0123.scope")
        XCTAssertFalse(try rule("/usr/bin/git").matches(container))
        XCTAssertEqual(AccessPolicy.open.decide(container, remembered: nil), .ask, "never served by \"any program of yours\"")
        XCTAssertEqual(AccessPolicy.open.decide(container, remembered: true), .grant(.approved))
        XCTAssertEqual(AccessPolicy(allowedClients: [try rule("unit:libpod-0123.scope")]).decide(container, remembered: nil), .grant(.listed))
        let nameless = ClientIdentity(.container, exe: "/usr/bin/git")
        XCTAssertEqual(AccessPolicy.open.decide(nameless, remembered: nil), .deny(.unidentified))

        let unreadable = ClientIdentity(.unidentified(why: "its /.flatpak-info is not a regular file"), exe: "/usr/bin/git", unit: "x.scope")
        XCTAssertTrue(unreadable.isConfined)
        XCTAssertNil(unreadable.policyExe)
        XCTAssertNil(unreadable.consentKey)
        XCTAssertNil(unreadable.entry)
        for entry in ["/usr/bin/git", "unit:x.scope", "flatpak:org.example.App", "ssh:unknown-host"] {
            XCTAssertFalse(try rule(entry).matches(unreadable), entry)
        }
        XCTAssertEqual(AccessPolicy.open.decide(unreadable, remembered: nil), .deny(.unidentified))
        XCTAssertEqual(AccessPolicy(confirm: .firstUse).decide(unreadable, remembered: true), .deny(.unidentified))

        let app = ClientIdentity(.flatpak(.init(id: "org.example.App", instance: "7")), exe: "/app/bin/app", unit: "app.scope")
        XCTAssertFalse(try rule("unit:app.scope").matches(app), "an app is named by its flatpak: entry only")
        XCTAssertEqual(app.runKey, "flatpak:org.example.App#7")
    }

    /// Issue 46: an app whose `/.flatpak-info` names an instance whose namespaces are not its own is not believed: no
    /// `flatpak:` entry, decision or open account serves it. A "not contained" app is judged like any other app (the
    /// holes are shown, not a policy of their own).
    func testAnAppNotInTheInstanceItNamesIsUnidentifiedEverywhere() throws {
        let faked = ClientIdentity(.unidentified(why: "its pid namespace 5 is not instance 42's (6)", claimedApp: "org.example.Mail"),
                                   exe: "/app/bin/mail")
        XCTAssertTrue(faked.isConfined)
        XCTAssertNil(faked.consentKey)
        XCTAssertNil(faked.flatpakAppID)
        XCTAssertFalse(try rule("flatpak:org.example.Mail").matches(faked))
        XCTAssertEqual(AccessPolicy.open.decide(faked, remembered: nil), .deny(.unidentified))
        XCTAssertEqual(AccessPolicy(allowedClients: [try rule("flatpak:org.example.Mail")]).decide(faked, remembered: nil),
                       .deny(.unidentified))
        XCTAssertEqual(AccessPolicy(confirm: .firstUse).decide(faked, remembered: true), .deny(.unidentified))

        let open = ClientIdentity(.flatpak(.init(id: "org.example.IDE", instance: "7", holes: ["socket=session-bus", "filesystem=host"])),
                                  exe: "/app/bin/ide")
        XCTAssertEqual(open.consentKey, "flatpak:org.example.IDE")
        XCTAssertEqual(AccessPolicy.open.decide(open, remembered: nil), .ask)
        XCTAssertEqual(AccessPolicy(allowedClients: [try rule("flatpak:org.example.IDE")]).decide(open, remembered: nil), .grant(.listed))
    }

    func testConsentKeyNamesTheAppOrTheExecutable() {
        XCTAssertEqual(ClientIdentity(exe: "/usr/bin/git", unit: "x.service").consentKey, "/usr/bin/git")
        XCTAssertEqual(ClientIdentity(.flatpak(.init(id: "org.gnome.Evolution")), exe: "/app/bin/evolution").consentKey, "flatpak:org.gnome.Evolution")
        XCTAssertNil(ClientIdentity(exe: "/usr/bin/git", exeDeleted: true).consentKey)
        XCTAssertNil(ClientIdentity(exe: nil).consentKey)
    }

    func testSummaryForStatus() throws {
        XCTAssertEqual(AccessPolicy.open.summary, "any process of yours (no allowed_clients); sandboxed apps, containers and forwarded hosts are asked")
        XCTAssertEqual(AccessPolicy(allowedClients: [try rule("/usr/bin/git"), try rule("unit:mbsync.service")]).summary,
                       "only /usr/bin/git, unit:mbsync.service")
        XCTAssertEqual(AccessPolicy(allowedClients: [try rule("/usr/bin/git")], confirm: .firstUse).summary,
                       "/usr/bin/git; asks others on first use")
        // Issue 54, item 2: an entry that can never match says so (ssh names port 22 without :22). Before: not a word.
        XCTAssertEqual(AccessPolicy(allowedClients: [try rule("ssh:build-box:22"), try rule("ssh:build-box:2222")]).summary,
                       "only ssh:build-box:22, ssh:build-box:2222 (ssh:build-box:22 never matches: ssh names a host on port 22 without :22; write ssh:build-box)")
        XCTAssertNil(try rule("ssh:build-box:2222").neverMatches)
        XCTAssertNil(try rule("ssh:build-box").neverMatches)
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
