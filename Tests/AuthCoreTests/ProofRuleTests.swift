import AuthCore
import Foundation
import XCTest

/// Issue 55: a grant's `--dpop-url` rules, which decide which requests the agent signs DPoP proofs for.
final class ProofRuleTests: XCTestCase {
    func allows(_ rule: String, _ method: String, _ url: String) throws -> Bool {
        try ProofRule(rule).allows(method: method, url: try XCTUnwrap(URL(string: url)))
    }

    func testAPrefixAllowsItsPathAndBelowOnASegmentBoundary() throws {
        let rule = "https://api.example.com/v1"
        XCTAssertTrue(try allows(rule, "GET", "https://api.example.com/v1"))
        XCTAssertTrue(try allows(rule, "POST", "https://api.example.com/v1/repos/x?page=2"))
        XCTAssertTrue(try allows(rule, "GET", "https://API.Example.com:443/v1/x"), "host case and the default port")
        XCTAssertFalse(try allows(rule, "GET", "https://api.example.com/v10"), "not a segment boundary")
        XCTAssertFalse(try allows(rule, "GET", "https://api.example.com/"))
        XCTAssertFalse(try allows(rule, "GET", "http://api.example.com/v1/x"), "another scheme")
        XCTAssertFalse(try allows(rule, "GET", "https://api.example.com:8443/v1/x"), "another port")
        XCTAssertFalse(try allows(rule, "GET", "https://api.example.com.evil.test/v1/x"), "another host")
        XCTAssertFalse(try allows(rule, "GET", "https://evil.test/v1/x"))
        XCTAssertTrue(try allows("https://api.example.com/v1/", "GET", "https://api.example.com/v1/x"))
        XCTAssertFalse(try allows("https://api.example.com/v1/", "GET", "https://api.example.com/v1"))
        XCTAssertTrue(try allows("https://api.example.com", "GET", "https://api.example.com/anything"))
    }

    func testNoSpellingEscapesThePrefix() throws {
        let rule = "https://api.example.com/v1"
        for url in ["https://api.example.com/v1/../admin", "https://api.example.com/v1/./x", "https://api.example.com/v1/%2e%2e/admin",
                    "https://api.example.com/v1%2f..%2fadmin", "https://api.example.com/v1/%5C..", "https://user@api.example.com/v1/x",
                    "https://user:pw@api.example.com/v1/x"] {
            XCTAssertFalse(try allows(rule, "GET", url), url)
        }
    }

    func testMethodsNarrowARule() throws {
        let rule = "GET,head https://api.example.com/v1"
        XCTAssertTrue(try allows(rule, "GET", "https://api.example.com/v1/x"))
        XCTAssertTrue(try allows(rule, "HEAD", "https://api.example.com/v1/x"))
        XCTAssertFalse(try allows(rule, "DELETE", "https://api.example.com/v1/x"))
        XCTAssertEqual(try ProofRule(rule).description, "GET,HEAD https://api.example.com/v1")
        XCTAssertEqual(try ProofRule("http://127.0.0.1:8080/api").description, "http://127.0.0.1:8080/api")
    }

    func testWhatIsNotARuleSaysWhy() {
        for text in ["", "api.example.com/v1", "ftp://example.com/", "https:///v1", "https://example.com/v1?x=1",
                     "https://example.com/v1#f", "https://u@example.com/", "https://example.com/a/../b", "G@T https://example.com/",
                     ",GET https://example.com/", "https://example.com/a%2Fb"] {
            XCTAssertThrowsError(try ProofRule(text), text) {
                XCTAssertEqual(($0 as? AuthError)?.code, .invalidTarget, text)
            }
        }
    }
}
