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
            """, "the rest byte for byte: no newline added at the end")
        let withoutHome = try XCTUnwrap(ConfigSection.removing("home", from: existing))
        XCTAssertTrue(withoutHome.hasSuffix("prompt = \"login\"\n\n# --- personal ---\n# trailing comment at the end"), withoutHome)
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

    /// TOML lets a sub-table stand anywhere in the file, also after other sections: `remove` takes every table of the
    /// account wherever it is (a sub-table left behind would define the account again, with no issuer, and the
    /// agent would not load the file), and nothing else.
    func testRemovingTakesSubTablesWrittenAwayFromTheSection() throws {
        let text = """
            [accounts.work.extra_auth_params]   # before its section
            login_hint = "me"

            [accounts.work]
            issuer = "https://login.example.com"
            client_id = "a"

            [accounts.home]
            issuer = "https://home.example.com"
            client_id = "b"

            [ accounts . "work" . 'extra_auth_params' ]
            prompt = "login"

            [accounts.workshop]
            issuer = "https://shop.example.com"
            client_id = "c"

            [[accounts.work.more]]
            x = 1
            [accounts."work.x"]
            client_id = "d"
            [accounts.home.extra_auth_params]
            prompt = "consent"

            """
        XCTAssertEqual(ConfigSection.removing("work", from: text), """
            [accounts.home]
            issuer = "https://home.example.com"
            client_id = "b"

            [accounts.workshop]
            issuer = "https://shop.example.com"
            client_id = "c"

            [accounts."work.x"]
            client_id = "d"
            [accounts.home.extra_auth_params]
            prompt = "consent"

            """)
    }

    /// An array of tables after the section is another table, not the section's lines; a multi-line string whose
    /// lines look like headers or comments is a value, not a header.
    func testRemovingKeepsArraysOfTablesAndReadsMultiLineValuesAsValues() throws {
        let text = """
            [accounts.work]
            client_secret = \"\"\"
            [agent]
            # still the secret\"\"\"
            scopes = [
              "openid",
            ]
            [[tools]]
            name = "x"

            [accounts.home]
            client_secret = '''
            [accounts.work.extra_auth_params]
            '''

            """
        XCTAssertEqual(ConfigSection.removing("work", from: text), """
            [[tools]]
            name = "x"

            [accounts.home]
            client_secret = '''
            [accounts.work.extra_auth_params]
            '''

            """)
        XCTAssertFalse(ConfigSection.defines("agent", in: text))
        let withoutWork = try XCTUnwrap(ConfigSection.removing("work", from: text))
        XCTAssertFalse(ConfigSection.defines("work", in: withoutWork), "a header inside a string defines nothing")
    }

    /// Only a stray sub-table left: `add` refuses the name (it would merge with it) and says to remove it first, so
    /// `remove` must find it.
    func testAStraySubTableAloneIsDefinedAndRemoved() throws {
        let text = "[agent]\nlog_level = \"debug\"\n\n[accounts.work.extra_auth_params]\nprompt = \"login\"\n"
        XCTAssertTrue(ConfigSection.defines("work", in: text))
        XCTAssertEqual(ConfigSection.removing("work", from: text), "[agent]\nlog_level = \"debug\"\n")
        XCTAssertEqual(ConfigSection.removing("work", from: "[[accounts.work.list]]\n"), "")
    }

    /// Everything outside the account's tables is kept byte for byte: CRLF line ends, blank lines at the end of the
    /// file, a last line without a newline.
    func testRemovingKeepsTheRestByteForByte() throws {
        let crlf = "[agent]\r\nlog_level = \"debug\"\r\n\r\n[accounts.work]\r\nclient_id = \"a\"\r\n\r\n[accounts.home]\r\nclient_id = \"b\"\r\n"
        XCTAssertTrue(ConfigSection.defines("home", in: crlf))
        XCTAssertEqual(ConfigSection.removing("work", from: crlf),
                       "[agent]\r\nlog_level = \"debug\"\r\n\r\n[accounts.home]\r\nclient_id = \"b\"\r\n")
        let text = "[accounts.work]\nclient_id = \"a\"\n\n[agent]\nlog_level = \"debug\"\n\n\n"
        XCTAssertEqual(ConfigSection.removing("work", from: text), "[agent]\nlog_level = \"debug\"\n\n\n")
        XCTAssertEqual(ConfigSection.removing("work", from: "[accounts.work]\nclient_id = \"a\"\n\n[agent]\nx = 1"),
                       "[agent]\nx = 1")
    }
}
