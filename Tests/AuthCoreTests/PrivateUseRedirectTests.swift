@testable import AuthCore
import Foundation
import XCTest

/// Private-use URI scheme redirects (RFC 8252 §7.1): what a scheme redirect may look like, how a handed-over URI is
/// judged, and that the broker opens no listener for it.
final class PrivateUseRedirectTests: XCTestCase {
    let uri = "com.example.app:/oauth2/callback/work"

    func testValidSchemeRedirect() throws {
        let redirect = try PrivateUseRedirect.parse(uri).get()
        XCTAssertEqual(redirect.scheme, "com.example.app")
        XCTAssertEqual(redirect.path, "/oauth2/callback/work")
        XCTAssertEqual(redirect.uri, uri)
        XCTAssertTrue(redirect.addresses("\(uri)?code=a&state=b"))
        XCTAssertTrue(redirect.addresses(uri))
        XCTAssertFalse(redirect.addresses("\(uri)/extra?code=a"))
        XCTAssertFalse(redirect.addresses("com.example.app:/oauth2/callback/personal?code=a"))
        XCTAssertFalse(redirect.addresses("com.example.application:/oauth2/callback/work?code=a"))
    }

    func testRefusedSchemeRedirects() {
        let bad = [
            "myapp:/callback",                          // no period: not a reverse domain
            "com.example.app://callback",               // authority form (two slashes)
            "com.example.app:callback",                 // no slash
            "https://example.com/callback",             // never http(s)
            "http:/callback",
            "Com.Example.App:/callback",                // upper case
            "com..example:/callback",                   // empty label
            "com.-example:/callback",                   // label starting with '-'
            "com.1example:/callback",                   // label starting with a digit
            "com.example.app:/callback?x=1",            // query
            "com.example.app:/callback#f",              // fragment
            "com.example.app:/call back",               // space
            "no-colon",
        ]
        for text in bad {
            if case .success = PrivateUseRedirect.parse(text) { XCTFail("accepted \(text)") }
        }
    }

    func session() -> LoginSession {
        let metadata = ProviderMetadata(issuer: Fixtures.issuer, authorizationEndpoint: URL(string: "https://issuer.example/authorize")!,
                                        tokenEndpoint: URL(string: "https://issuer.example/token")!)
        return LoginSession(account: Fixtures.account(), metadata: metadata, state: "the-state", nonce: "n")
    }

    func testHandedOverURIIsJudgedLikeAnyResponse() {
        let s = session()
        XCTAssertEqual(s.judge(pastedURL: "\(uri)?code=abc&state=the-state", redirectURI: uri), .code(Secret("abc")))
        XCTAssertEqual(s.judge(pastedURL: "\(uri)?error=access_denied&state=the-state", redirectURI: uri),
                       .denied(error: "access_denied", description: nil))
        let rejected = [
            "\(uri)?code=abc&state=forged",                                    // state
            "\(uri)?code=abc",                                                 // no state
            "\(uri)?error=access_denied",                                      // error= without state
            "com.example.app://host/oauth2/callback/work?code=abc&state=the-state",  // authority
            "com.example.app:///oauth2/callback/work?code=abc&state=the-state",      // empty authority
            "com.example.app:/oauth2/callback/other?code=abc&state=the-state",       // path
            "com.example.other:/oauth2/callback/work?code=abc&state=the-state",      // scheme
            "\(uri)?code=abc&state=the-state#frag",                            // fragment
        ]
        for text in rejected {
            guard case .rejected = s.judge(pastedURL: text, redirectURI: uri) else { return XCTFail("accepted \(text)") }
        }
    }

    /// Two sign-ins at once on one private-use redirect URI (an account and a grant's own sign-in of it): the
    /// response goes to the one whose state it carries. Before: to the first, which refused it, and the other timed out.
    func testAResponseGoesToTheSignInItAnswersWhenTwoShareTheRedirect() async throws {
        var work = Fixtures.account(scopes: [])
        work.privateUseRedirect = try PrivateUseRedirect.parse(uri).get()
        var home = work
        home.name = "home"
        let browser = FakeBrowser()
        let broker = Fixtures.broker(accounts: [work, home], browser: browser)
        _ = try await broker.beginLogin(account: "work")
        let first = try XCTUnwrap(browser.lastQuery["state"]?.first)
        _ = try await broker.beginLogin(account: "home")
        let second = try XCTUnwrap(browser.lastQuery["state"]?.first)
        XCTAssertNotEqual(first, second)
        let toHome = try await broker.account(forCallback: "\(uri)?code=c&state=\(second)")
        XCTAssertEqual(toHome, "home")
        let toWork = try await broker.account(forCallback: "\(uri)?code=c&state=\(first)")
        XCTAssertEqual(toWork, "work")
    }

    func testSchemeSignInOpensNoListenerAndCompletesThroughTheCallback() async throws {
        var account = Fixtures.account(scopes: [])
        account.privateUseRedirect = try PrivateUseRedirect.parse(uri).get()
        XCTAssertEqual(account.registeredRedirectURI, uri)
        let redirects = FakeRedirects()
        let browser = FakeBrowser()
        let http = FakeHTTP()
        http.tokenReplies = [FakeHTTP.tokenReply(access: "at-1", refresh: "rt-1")]
        let broker = Fixtures.broker(accounts: [account], http: http, redirects: redirects, browser: browser)
        let ticket = try await broker.beginLogin(account: "work")
        XCTAssertEqual(redirects.opened, 0, "no loopback listener for a private-use scheme")
        XCTAssertEqual(ticket.redirectURI, uri)
        XCTAssertEqual(browser.lastQuery["redirect_uri"], [uri])
        let state = try XCTUnwrap(browser.lastQuery["state"]?.first)

        let found = try await broker.account(forCallback: "\(uri)?code=c&state=\(state)")
        XCTAssertEqual(found, "work")
        await assertThrows(.loginFailed) { _ = try await broker.account(forCallback: "com.example.app:/elsewhere?code=c") }
        await assertThrows(.loginFailed) {
            try await broker.submitRedirect(account: "work", url: "\(uri)?code=c&state=wrong")
        }
        try await broker.submitRedirect(account: "work", url: "\(uri)?code=c&state=\(state)")
        _ = try await broker.awaitLogin(ticket)
        XCTAssertEqual(http.tokenPosts.first?["redirect_uri"], uri)
        await assertThrows(.loginFailed) {
            try await broker.submitRedirect(account: "work", url: "\(uri)?code=c&state=\(state)")
        }
    }
}
