@testable import AuthCLI
import XCTest

final class ConfigSectionTests: XCTestCase {
    func testQuoteEscapesWhatTOMLRequires() {
        XCTAssertEqual(ConfigSection.quote("plain"), "\"plain\"")
        XCTAssertEqual(ConfigSection.quote("a\"b\\c"), "\"a\\\"b\\\\c\"")
        XCTAssertEqual(ConfigSection.quote("x\ny\u{1}"), "\"x\\ny\\u0001\"")
    }

    func testRenderGoogle() throws {
        let section = ConfigSection.render(name: "gmail", preset: try ProviderPreset.named("google"), clientID: "id.apps",
                                           clientSecret: "GOCSPX-s\"x")
        XCTAssertEqual(section, """
            # added by `authctl accounts add` --preset google
            [accounts.gmail]
            issuer = "https://accounts.google.com"
            client_id = "id.apps"
            client_secret = "GOCSPX-s\\"x"
            scopes = ["openid", "email"]
            extra_auth_params = { access_type = "offline", prompt = "consent" }
            sign_in_lifetime = "180d"
            sign_in_lifetime_kind = "idle"

            """)
    }

    func testMicrosoftPresetCarriesItsDocumentedIdleLifetime() throws {
        let section = ConfigSection.render(name: "mail", preset: try ProviderPreset.named("microsoft"), clientID: "c",
                                           clientSecret: nil)
        XCTAssertTrue(section.contains("sign_in_lifetime = \"90d\"\nsign_in_lifetime_kind = \"idle\"\n"), section)
        XCTAssertNil(try ProviderPreset.named("github").signInLifetime, "GitHub Apps send refresh_token_expires_in")
    }

    let existing = """
        # my accounts
        [agent]
        log_level = "debug"

        [accounts.work]   # the day job
        issuer = "https://login.example.com"
        client_id = "a"
        # a note inside work
        scopes = ["openid"]

        [accounts.work.extra_auth_params]
        prompt = "login"

        # --- personal ---
        [accounts."home"]
        issuer = "https://home.example.com"
        client_id = "b"
        # trailing comment at the end
        """

    func testDefinesFindsBareQuotedAndSubTables() {
        XCTAssertTrue(ConfigSection.defines("work", in: existing))
        XCTAssertTrue(ConfigSection.defines("home", in: existing))
        XCTAssertFalse(ConfigSection.defines("wor", in: existing))
        XCTAssertFalse(ConfigSection.defines("agent", in: existing))
    }

    func testRemovingKeepsEverythingElse() throws {
        let withoutWork = try XCTUnwrap(ConfigSection.removing("work", from: existing))
        XCTAssertEqual(withoutWork, """
            # my accounts
            [agent]
            log_level = "debug"

            # --- personal ---
            [accounts."home"]
            issuer = "https://home.example.com"
            client_id = "b"
            # trailing comment at the end

            """)
        let withoutHome = try XCTUnwrap(ConfigSection.removing("home", from: existing))
        XCTAssertTrue(withoutHome.hasSuffix("prompt = \"login\"\n\n# --- personal ---\n# trailing comment at the end\n"), withoutHome)
        XCTAssertNil(ConfigSection.removing("nobody", from: existing))
    }

    func testAddThenRemoveRoundTrips() throws {
        let section = ConfigSection.render(name: "new", preset: try ProviderPreset.named("oidc", issuer: "https://x.example"),
                                           clientID: "c", clientSecret: nil)
        let added = ConfigSection.appending(section, to: existing)
        XCTAssertTrue(added.hasPrefix(existing))
        XCTAssertTrue(ConfigSection.defines("new", in: added))
        XCTAssertEqual(ConfigSection.removing("new", from: added), existing + "\n")
        XCTAssertEqual(ConfigSection.appending(section, to: ""), section)
    }
}
