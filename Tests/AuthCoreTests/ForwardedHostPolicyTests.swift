import AuthCore
import XCTest

/// Issue 45: a host reached through `authctl forward` is a caller of its own, named by ssh's name for it and the key
/// ssh was shown; never a local program.
final class ForwardedHostPolicyTests: XCTestCase {
    let keyA = "SHA256:" + String(repeating: "A", count: 43)
    let keyB = "SHA256:" + String(repeating: "b", count: 42) + "/"

    func rule(_ text: String) throws -> ClientRule { try ClientRule.parse(text).get() }

    func host(_ name: String, _ key: String) -> ClientIdentity {
        ClientIdentity(.forwarded(.init(name: name, fingerprint: key, session: "s1")), exe: "/usr/bin/ssh")
    }

    func testSSHEntriesNameAHostPinnedOrNotAndTheUnknownHost() throws {
        XCTAssertEqual(try rule("ssh:build-box"), .ssh(host: "build-box", fingerprint: nil))
        XCTAssertEqual(try rule("ssh:10.0.0.7:2222"), .ssh(host: "10.0.0.7:2222", fingerprint: nil))
        XCTAssertEqual(try rule("ssh:build-box@\(keyA)"), .ssh(host: "build-box", fingerprint: keyA))
        XCTAssertEqual(try rule("ssh:unknown-host"), .ssh(host: nil, fingerprint: nil))
        XCTAssertEqual(try rule("ssh:build-box@\(keyA)").description, "ssh:build-box@\(keyA)")
        XCTAssertEqual(try rule("ssh:unknown-host").description, "ssh:unknown-host")
        for bad in ["ssh:", "ssh:build box", "ssh:-oProxyCommand", "ssh:host@MD5:aa", "ssh:host@SHA256:short",
                    "ssh:host@", "ssh:unknown-host@\(keyA)", "ssh:a/b"] {
            XCTAssertThrowsError(try ClientRule.parse(bad).get(), "'\(bad)' must be refused")
        }
    }

    func testAHostIsMatchedByItsNameAndAPinnedKeyOnly() throws {
        let byName = try rule("ssh:build-box")
        let pinned = try rule("ssh:build-box@\(keyA)")
        XCTAssertTrue(byName.matches(host("build-box", keyA)))
        XCTAssertTrue(byName.matches(host("build-box", keyB)), "by name: whatever key ssh accepted for it")
        XCTAssertTrue(pinned.matches(host("build-box", keyA)))
        XCTAssertFalse(pinned.matches(host("build-box", keyB)), "pinned: another key is another host")
        XCTAssertFalse(byName.matches(host("build-box2", keyA)))
        XCTAssertFalse(byName.matches(ClientIdentity(.unknownForward, exe: "/usr/bin/ssh")))
        XCTAssertTrue(try rule("ssh:unknown-host").matches(ClientIdentity(.unknownForward, exe: "/usr/bin/ssh")))
        XCTAssertFalse(try rule("ssh:unknown-host").matches(host("build-box", keyA)))
        XCTAssertFalse(try rule("/usr/bin/ssh").matches(host("build-box", keyA)), "a host is never its local ssh")
        XCTAssertFalse(try rule("/usr/bin/ssh").matches(ClientIdentity(.unknownForward, exe: "/usr/bin/ssh")))
    }

    /// Issue 54, item 2: a plain `Host build-box` block (HostName 127.0.0.1, Port 22022) is named by the alias the
    /// person typed as well as by ssh's key name; a pin still binds to the key. Before: only `127.0.0.1:22022`.
    func testAHostIsMatchedByTheAliasTypedOrItsKeyNameAndAPinStillBindsTheKey() throws {
        let typed = ClientIdentity(.forwarded(.init(name: "127.0.0.1:22022", alias: "build-box", fingerprint: keyA,
                                                    session: "s1")), exe: "/usr/bin/ssh")
        XCTAssertTrue(try rule("ssh:build-box").matches(typed), "the name the person typed")
        XCTAssertTrue(try rule("ssh:127.0.0.1:22022").matches(typed), "the name ssh checks the key under")
        XCTAssertTrue(try rule("ssh:build-box@\(keyA)").matches(typed))
        XCTAssertFalse(try rule("ssh:build-box@\(keyB)").matches(typed), "a pin binds to the key, whatever the name")
        XCTAssertFalse(try rule("ssh:other-box").matches(typed))
        XCTAssertEqual(typed.consentKey, "ssh:build-box@\(keyA)", "remembered under the name typed, with its key")
        XCTAssertEqual(typed.entry, "ssh:build-box", "refusals advise the name typed")
        XCTAssertEqual(AccessPolicy(allowedClients: [try rule("ssh:build-box")]).decide(typed, remembered: nil), .grant(.listed))
    }

    /// Issue 54, item 7: an entry that names the host but pins another key says which key it pins.
    func testAPinOnAnotherKeyOfTheHostIsFoundForTheRefusal() throws {
        guard case .forwarded(let shown) = host("build-box", keyB).kind else { return XCTFail() }
        XCTAssertEqual(try rule("ssh:build-box@\(keyA)").pinnedOtherKey(for: shown), keyA)
        XCTAssertNil(try rule("ssh:build-box@\(keyB)").pinnedOtherKey(for: shown), "its own key")
        XCTAssertNil(try rule("ssh:other@\(keyA)").pinnedOtherKey(for: shown), "another host")
        XCTAssertNil(try rule("ssh:build-box").pinnedOtherKey(for: shown), "no pin")
    }

    func testAHostIsAskedAboutByAnAccountWithoutAPolicyAndRememberedWithItsKey() throws {
        let a = host("build-box", keyA)
        XCTAssertTrue(a.isConfined)
        XCTAssertNil(a.policyExe)
        XCTAssertEqual(a.consentKey, "ssh:build-box@\(keyA)")
        XCTAssertNotEqual(a.consentKey, host("build-box", keyB).consentKey, "a new key is asked about again")
        XCTAssertEqual(AccessPolicy.open.decide(a, remembered: nil), .ask)
        XCTAssertEqual(AccessPolicy.open.decide(a, remembered: true), .grant(.approved))
        XCTAssertTrue(AccessPolicy.open.mayAsk(a))
        let listed = AccessPolicy(allowedClients: [try rule("ssh:build-box")])
        XCTAssertEqual(listed.decide(a, remembered: nil), .grant(.listed))
        XCTAssertEqual(listed.decide(host("other", keyA), remembered: nil), .deny(.notListed))
    }

    func testAnUnknownForwardIsRefusedUnlessAllowedExplicitly() throws {
        let unknown = ClientIdentity(.unknownForward, exe: "/usr/bin/ssh")
        XCTAssertNil(unknown.consentKey)
        XCTAssertEqual(AccessPolicy.open.decide(unknown, remembered: nil), .deny(.unknownForward))
        XCTAssertEqual(AccessPolicy(confirm: .firstUse).decide(unknown, remembered: nil), .deny(.unknownForward))
        XCTAssertEqual(AccessPolicy(allowedClients: [try rule("/usr/bin/ssh")]).decide(unknown, remembered: nil),
                       .deny(.unknownForward), "naming ssh's path does not admit every host")
        XCTAssertEqual(AccessPolicy(allowedClients: [try rule("ssh:unknown-host")]).decide(unknown, remembered: nil),
                       .grant(.listed))
        XCTAssertEqual(unknown.entry, "ssh:unknown-host")
        XCTAssertEqual(host("build-box", keyA).entry, "ssh:build-box", "a refusal advises the ssh: spelling only")
    }

    /// Issue 53, hole 2: a forwarded caller keeps the local ssh's unit and path, which must never name it.
    func testAForwardedCallerIsNamedBySSHEntriesOnly() throws {
        var forwarded = host("build-box", keyA)
        forwarded.unit = "deploy.service"
        var unknown = ClientIdentity(.unknownForward, exe: "/usr/bin/ssh")
        unknown.unit = "deploy.service"
        for caller in [forwarded, unknown] {
            XCTAssertFalse(try rule("unit:deploy.service").matches(caller))
            XCTAssertFalse(try rule("/usr/bin/ssh").matches(caller))
            XCTAssertNotEqual(AccessPolicy(allowedClients: [try rule("unit:deploy.service")]).decide(caller, remembered: nil), .grant(.listed))
        }
        XCTAssertEqual(AccessPolicy(allowedClients: [try rule("unit:deploy.service")]).decide(unknown, remembered: nil), .deny(.unknownForward))
    }
}
