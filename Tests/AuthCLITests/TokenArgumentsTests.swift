@testable import AuthCLI
import XCTest

/// The fast path's parser for `authctl token` and `authctl git-credential`: what it accepts and, as importantly,
/// what it leaves to ArgumentParser (nil). authctlTests checks that ArgumentParser reads every accepted form the same.
final class TokenArgumentsTests: XCTestCase {
    private func token(_ arguments: String...) -> TokenArguments? { TokenArguments.parse(arguments) }
    private func git(_ arguments: String...) -> GitCredentialArguments? { GitCredentialArguments.parse(arguments) }

    func testTheCommonFormsParse() {
        XCTAssertEqual(token("work"), TokenArguments(account: "work"))
        XCTAssertEqual(token("work", "--header"), TokenArguments(account: "work", header: true))
        XCTAssertEqual(token("--json", "work", "--min-valid", "600"), TokenArguments(account: "work", minValid: 600, json: true))
        XCTAssertEqual(token("work", "--min-valid=0", "--refresh", "--interactive", "--id-token"),
                       TokenArguments(account: "work", refresh: true, interactive: true, idToken: true))
        XCTAssertEqual(token("work", "--socket", "/run/x.sock", "--resource=https://api.example.com/"),
                       TokenArguments(account: "work", socket: "/run/x.sock", resource: "https://api.example.com/"))
    }

    func testScopesRepeatInOrderAndKeepTheirSpaces() {
        XCTAssertEqual(token("work", "--scope", "read", "--scope=write admin")?.scopes, ["read", "write admin"])
    }

    func testValuesMayLookLikeOtherOptionsNamesOrTheAccount() {
        XCTAssertEqual(token("--scope", "work", "json"), TokenArguments(account: "json", scopes: ["work"]))
        XCTAssertEqual(token("work", "--socket=a=b"), TokenArguments(account: "work", socket: "a=b"), "only the first '=' splits")
    }

    func testLeavesHelpAndUsageErrorsToArgumentParser() {
        XCTAssertNil(token(), "no account")
        XCTAssertNil(token("work", "other"), "two positionals")
        XCTAssertNil(token("help"))
        XCTAssertNil(token("work", "--help"))
        XCTAssertNil(token("work", "-h"))
        XCTAssertNil(token("--", "work"))
        XCTAssertNil(token("-"))
        XCTAssertNil(token(""), "an empty account")
        XCTAssertNil(token("work", "--"))
        XCTAssertNil(token("work", "--bogus"))
        XCTAssertNil(token("work", "--json=true"), "a flag with a value")
        XCTAssertNil(token("work", "--json", "--json"), "a repeated flag")
        XCTAssertNil(token("work", "--header", "--id-token"), "validate() refuses it")
        XCTAssertNil(token("work", "--min-valid"), "a missing value")
        XCTAssertNil(token("work", "--min-valid", "--json"))
        XCTAssertNil(token("work", "--min-valid=1", "--min-valid=2"), "a repeated single option")
        XCTAssertNil(token("work", "--scope="), "an empty value")
        XCTAssertNil(token("work", "--resource", "-x"), "a value that starts with '-'")
    }

    func testMinValidIsAPlainDecimalCountOrLeftToArgumentParser() {
        XCTAssertEqual(token("work", "--min-valid", "0042")?.minValid, 42)
        for odd in ["-5", "+5", " 5", "5s", "0x10", "", "99999999999999999999", "٣"] {
            XCTAssertNil(token("work", "--min-valid=\(odd)"), odd)
        }
    }

    func testGitCredentialForms() {
        XCTAssertEqual(git("get"), GitCredentialArguments(action: "get"))
        XCTAssertEqual(git("--account", "gitlab", "get"), GitCredentialArguments(action: "get", account: "gitlab"))
        XCTAssertEqual(git("store", "--username=x-access-token", "--min-valid", "0", "--socket", "/s"),
                       GitCredentialArguments(action: "store", socket: "/s", username: "x-access-token", minValid: 0))
        XCTAssertEqual(GitCredentialArguments(action: "get").username, "oauth2")
        XCTAssertEqual(GitCredentialArguments(action: "get").minValid, 60)
    }

    func testGitCredentialLeavesTheRestToArgumentParser() {
        XCTAssertNil(git())
        XCTAssertNil(git("get", "erase"))
        XCTAssertNil(git("--help"))
        XCTAssertNil(git("get", "--json"), "git-credential has no flags")
        XCTAssertNil(git("get", "--username", "a\nb"), "validate() refuses it")
        XCTAssertNil(git("get", "--min-valid=-1"))
        XCTAssertNil(git("get", "--account=a", "--account=b"))
    }
}
