@testable import AuthCLI
import XCTest

final class GitCredentialTests: XCTestCase {
    private func parse(_ text: String) throws -> GitCredentialRequest { try GitCredentialRequest.parse(Array(text.utf8)) }

    func testParsesWhatGitSendsAndIgnoresUnknownAttributes() throws {
        let request = try parse("capability[]=authtype\nprotocol=https\nhost=gitlab.com:8443\npath=group/repo.git\n"
            + "username=alice\nwwwauth[]=Basic realm=\"GitLab\"\n\n")
        XCTAssertEqual(request, GitCredentialRequest(protocol: "https", host: "gitlab.com:8443", path: "group/repo.git", username: "alice"))
    }

    func testStopsAtTheFirstBlankLineAndAcceptsEndOfInputInstead() throws {
        XCTAssertEqual(try parse("protocol=https\nhost=a\n\nhost=b\n").host, "a")
        XCTAssertEqual(try parse("protocol=https\nhost=a").host, "a", "no trailing newline: the end of input ends it")
        XCTAssertEqual(try parse(""), GitCredentialRequest())
        XCTAssertEqual(try parse("\nprotocol=https\n"), GitCredentialRequest(), "a leading blank line is an empty request")
    }

    func testValueIsEverythingAfterTheFirstEqualsAndLaterKeysWin() throws {
        let request = try parse("host=a\nhost=b\nusername=x=y\r\n")
        XCTAssertEqual(request.host, "b")
        XCTAssertEqual(request.username, "x=y", "the first '=' splits; a trailing CR is dropped")
    }

    func testRejectsLinesThatAreNotKeyValue() {
        XCTAssertThrowsError(try parse("protocol=https\nnonsense\n")) { error in
            XCTAssertEqual(error as? GitCredentialInputError, .malformedLine(line: 2, reason: "it is not key=value"))
        }
        XCTAssertThrowsError(try parse("=value\n")) { error in
            XCTAssertEqual(error as? GitCredentialInputError, .malformedLine(line: 1, reason: "the key is empty"))
        }
        XCTAssertThrowsError(try GitCredentialRequest.parse(Array("host=a\0b\n".utf8)))
        XCTAssertThrowsError(try GitCredentialRequest.parse([UInt8]("host=".utf8) + [0xFF, 0x0A]), "not UTF-8")
    }

    /// git 2.41 hands helpers the server's WWW-Authenticate headers as `wwwauth[]`, bytes as they came (a Latin-1
    /// realm): an attribute the helper does not read is skipped, whatever its bytes.
    func testAnAttributeItDoesNotReadNeedNotBeUTF8() throws {
        let input = [UInt8]("protocol=https\nhost=git.example\nwwwauth[]=Basic realm=\"Z".utf8) + [0xFC]
            + [UInt8]("rich\"\n\n".utf8)
        let request = try GitCredentialRequest.parse(input)
        XCTAssertEqual(request.host, "git.example")
        XCTAssertEqual(request.protocol, "https")
    }

    func testRejectsLinesOver64KiBButAcceptsExactly64KiB() throws {
        let limit = GitCredentialRequest.maxLineBytes
        XCTAssertEqual(limit, 65_536)
        let exact = "path=" + String(repeating: "p", count: limit - 5)
        XCTAssertEqual(try parse(exact + "\n").path?.utf8.count, limit - 5)
        XCTAssertThrowsError(try parse(exact + "p\n")) { error in
            XCTAssertEqual(error as? GitCredentialInputError, .lineTooLong(line: 1, limit: limit))
        }
        XCTAssertThrowsError(try parse(exact + "p"), "also without a final newline")
    }

    func testRejectsInputOverTheTotalCap() {
        let line = "path=" + String(repeating: "p", count: 60_000) + "\n"
        let text = String(repeating: line, count: GitCredentialRequest.maxInputBytes / line.utf8.count + 1)
        XCTAssertThrowsError(try parse(text)) { error in
            XCTAssertEqual(error as? GitCredentialInputError, .inputTooLarge(limit: GitCredentialRequest.maxInputBytes))
        }
    }

    func testCompletenessIsABlankLine() {
        XCTAssertFalse(GitCredentialRequest.isComplete([]))
        XCTAssertFalse(GitCredentialRequest.isComplete(Array("protocol=https\nhost=a\n".utf8)))
        XCTAssertTrue(GitCredentialRequest.isComplete(Array("protocol=https\nhost=a\n\n".utf8)))
        XCTAssertTrue(GitCredentialRequest.isComplete(Array("protocol=https\r\n\r\n".utf8)))
        XCTAssertTrue(GitCredentialRequest.isComplete(Array("\n".utf8)))
    }

    func testTokensGoOnlyOverHTTPSOrToLoopbackHTTP() {
        XCTAssertNil(GitCredentialRequest(protocol: "https", host: "gitlab.com").refusal)
        XCTAssertNil(GitCredentialRequest(protocol: "HTTPS", host: "gitlab.com").refusal)
        XCTAssertNil(GitCredentialRequest(protocol: "http", host: "127.0.0.1:8080").refusal)
        XCTAssertNil(GitCredentialRequest(protocol: "http", host: "127.0.0.1").refusal)
        XCTAssertNil(GitCredentialRequest(protocol: "http", host: "[::1]:8080").refusal)
        XCTAssertNotNil(GitCredentialRequest(protocol: "http", host: "gitlab.com").refusal)
        XCTAssertNotNil(GitCredentialRequest(protocol: "http", host: "localhost:8080").refusal, "names can resolve anywhere")
        XCTAssertNotNil(GitCredentialRequest(protocol: "http", host: "127.0.0.1.evil.example").refusal)
        XCTAssertNotNil(GitCredentialRequest(protocol: "http", host: "127.0.0.1:80x").refusal)
        XCTAssertNotNil(GitCredentialRequest(protocol: "http", host: "[::1]evil").refusal)
        XCTAssertNotNil(GitCredentialRequest(protocol: "http", host: nil).refusal)
        XCTAssertNotNil(GitCredentialRequest(protocol: "smtp", host: "mail.example.com").refusal)
        XCTAssertNotNil(GitCredentialRequest(protocol: nil, host: "gitlab.com").refusal)
    }

    func testReplyIsUsernamePasswordExpiryAndABlankLine() throws {
        let reply = GitCredentialReply(username: "oauth2", password: "AT-123", passwordExpiryUTC: 1_800_000_000)
        XCTAssertEqual(try reply.encoded(), "username=oauth2\npassword=AT-123\npassword_expiry_utc=1800000000\n\n")
        XCTAssertEqual(try GitCredentialReply(username: "u", password: "p", passwordExpiryUTC: nil).encoded(),
                       "username=u\npassword=p\n\n")
    }

    func testReplyRefusesValuesThatWouldBreakTheLineFormatWithoutShowingThem() {
        let injected = GitCredentialReply(username: "oauth2", password: "AT\nusername=evil", passwordExpiryUTC: nil)
        XCTAssertThrowsError(try injected.encoded()) { error in
            XCTAssertEqual(error as? GitCredentialReplyError, .unsafeValue("password"))
            XCTAssertFalse(String(describing: error).contains("AT"), "the error never carries the token")
        }
        XCTAssertThrowsError(try GitCredentialReply(username: "a\rb", password: "p", passwordExpiryUTC: nil).encoded())
        XCTAssertThrowsError(try GitCredentialReply(username: "u", password: "", passwordExpiryUTC: nil).encoded())
    }
}

final class GitHostMapTests: XCTestCase {
    let entries: [(account: String, pattern: String)] = [
        ("gitlab", "gitlab.com"), ("team", "gitlab.com/team/"), ("team-infra", "gitlab.com/team/infra"),
        ("local", "127.0.0.1:8080"), ("twin-a", "git.example.com"), ("twin-b", "Git.Example.com"),
    ]

    func outcome(_ host: String?, _ path: String? = nil) -> GitHostMap.Outcome {
        GitHostMap.account(for: GitCredentialRequest(protocol: "https", host: host, path: path), entries: entries)
    }

    func testMostSpecificEntryWins() {
        XCTAssertEqual(outcome("gitlab.com"), .account("gitlab"), "without a path only host entries match")
        XCTAssertEqual(outcome("GitLab.com", "other/repo.git"), .account("gitlab"))
        XCTAssertEqual(outcome("gitlab.com", "team/repo.git"), .account("team"))
        XCTAssertEqual(outcome("gitlab.com", "team/infra/deploy.git"), .account("team-infra"))
        XCTAssertEqual(outcome("gitlab.com", "teammates/repo.git"), .account("gitlab"), "whole segments only")
    }

    func testPortsUnknownHostsAndTies() {
        XCTAssertEqual(outcome("127.0.0.1:8080"), .account("local"))
        XCTAssertEqual(outcome("127.0.0.1"), .none, "the port is part of the host")
        XCTAssertEqual(outcome("github.com"), .none)
        XCTAssertEqual(outcome(nil), .none)
        XCTAssertEqual(outcome("git.example.com"), .ambiguous(["twin-a", "twin-b"]))
    }
}
