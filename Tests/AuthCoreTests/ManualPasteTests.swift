import AuthTestSupport
@testable import AuthCore
import Foundation
import XCTest

/// Manual paste (`authctl login --no-browser`): a pasted final redirect URL is judged exactly like a response that
/// reached the loopback listener, and competes with the listener for the single use of the sign-in.
final class ManualPasteTests: XCTestCase {
    let base = "http://127.0.0.1:4000/oauth2/callback/work"

    func session(requiresIss: Bool = false) -> LoginSession {
        let metadata = ProviderMetadata(issuer: Fixtures.issuer, authorizationEndpoint: URL(string: "https://issuer.example/authorize")!,
                                        tokenEndpoint: URL(string: "https://issuer.example/token")!, requiresIssInResponse: requiresIss)
        return LoginSession(account: Fixtures.account(), metadata: metadata, state: "the-state", nonce: "n")
    }

    func rejected(_ verdict: LoginSession.Verdict, file: StaticString = #filePath, line: UInt = #line) {
        guard case .rejected = verdict else { return XCTFail("expected rejected, got \(verdict)", file: file, line: line) }
    }

    func testExactRedirectURIWithValidStateGivesTheCode() {
        XCTAssertEqual(session().judge(pastedURL: "\(base)?code=abc&state=the-state", redirectURI: base), .code(Secret("abc")))
        XCTAssertEqual(session().judge(pastedURL: "  \(base)?state=the-state&code=abc\r\n", redirectURI: base), .code(Secret("abc")),
                       "surrounding whitespace from the terminal is ignored")
        XCTAssertEqual(session().judge(pastedURL: "HTTP://127.0.0.1:4000/oauth2/callback/work?code=abc&state=the-state", redirectURI: base),
                       .code(Secret("abc")), "the scheme is case-insensitive")
    }

    func testWrongPlaceIsRejected() {
        let s = session()
        let q = "?code=abc&state=the-state"
        rejected(s.judge(pastedURL: "http://127.0.0.2:4000/oauth2/callback/work\(q)", redirectURI: base))        // wrong host
        rejected(s.judge(pastedURL: "http://localhost:4000/oauth2/callback/work\(q)", redirectURI: base))        // never localhost
        rejected(s.judge(pastedURL: "http://[::1]:4000/oauth2/callback/work\(q)", redirectURI: base))            // other literal
        rejected(s.judge(pastedURL: "http://127.0.0.1:4001/oauth2/callback/work\(q)", redirectURI: base))        // wrong port
        rejected(s.judge(pastedURL: "http://127.0.0.1/oauth2/callback/work\(q)", redirectURI: base))             // no port
        rejected(s.judge(pastedURL: "http://127.0.0.1:4000/oauth2/callback/personal\(q)", redirectURI: base))    // wrong path
        rejected(s.judge(pastedURL: "http://127.0.0.1:4000/oauth2/callback/work/extra\(q)", redirectURI: base))  // extra path
        rejected(s.judge(pastedURL: "http://127.0.0.1:4000/oauth2/callback/work/\(q)", redirectURI: base))       // trailing slash
        rejected(s.judge(pastedURL: "http://127.0.0.1:4000/oauth2/callback/%77ork\(q)", redirectURI: base))      // encoded path
        rejected(s.judge(pastedURL: "https://127.0.0.1:4000/oauth2/callback/work\(q)", redirectURI: base))       // wrong scheme
        rejected(s.judge(pastedURL: "http://user@127.0.0.1:4000/oauth2/callback/work\(q)", redirectURI: base))   // user info
        rejected(s.judge(pastedURL: "\(base)\(q)#frag", redirectURI: base))                                       // fragment
        rejected(s.judge(pastedURL: "\(base)?code=abc&state=the-state x", redirectURI: base))                    // spaces inside
        rejected(s.judge(pastedURL: "code=abc&state=the-state", redirectURI: base))                              // only the query
        rejected(s.judge(pastedURL: "", redirectURI: base))
        rejected(s.judge(pastedURL: "\(base)?code=\(String(repeating: "a", count: 9000))&state=the-state", redirectURI: base))
    }

    func testQueryRulesAreTheListenersRules() {
        let s = session()
        rejected(s.judge(pastedURL: "\(base)?code=abc", redirectURI: base))                                 // missing state
        rejected(s.judge(pastedURL: "\(base)?code=abc&state=other", redirectURI: base))                     // wrong state
        rejected(s.judge(pastedURL: "\(base)?code=abc&state=the-state&state=the-state", redirectURI: base)) // repeated state
        rejected(s.judge(pastedURL: "\(base)?error=access_denied", redirectURI: base))                      // error without state
        XCTAssertEqual(s.judge(pastedURL: "\(base)?error=access_denied&state=the-state", redirectURI: base),
                       .denied(error: "access_denied", description: nil))
        rejected(session(requiresIss: true).judge(pastedURL: "\(base)?code=abc&state=the-state", redirectURI: base))  // RFC 9207
        XCTAssertEqual(session(requiresIss: true).judge(pastedURL: "\(base)?code=abc&state=the-state&iss=\(Fixtures.issuer.absoluteString)", redirectURI: base),
                       .code(Secret("abc")))
        for verdict in [s.judge(pastedURL: "http://localhost:4000/x?code=SECRETCODE&state=the-state", redirectURI: base),
                        s.judge(pastedURL: "\(base)?code=SECRETCODE&state=nope", redirectURI: base)] {
            guard case .rejected(let reason) = verdict else { return XCTFail() }
            XCTAssertFalse(reason.contains("SECRETCODE"), "reasons never repeat the pasted URL")
        }
    }

    func testPastedRedirectCompletesSignInOnceAndWrongOnesKeepItWaiting() async throws {
        let (store, http, redirects, browser) = (MemorySecretStore(), FakeHTTP(), FakeRedirects(), FakeBrowser())
        let broker = Fixtures.broker(store: store, http: http, redirects: redirects, browser: browser)
        let ticket = try await broker.beginLogin(account: "work", openBrowser: false)
        XCTAssertTrue(browser.opened.isEmpty, "no browser for manual paste")
        XCTAssertFalse(ticket.browserOpened)
        let query = LoginSession.parseQuery(ticket.authorizationURL.query ?? "")
        let state = try XCTUnwrap(query["state"]?.first)
        let nonce = try XCTUnwrap(query["nonce"]?.first)
        http.tokenReplies = [FakeHTTP.tokenReply(access: "at-1", refresh: "rt-1", idToken: await Fixtures.signedIDToken(nonce: nonce))]
        let redirect = ticket.redirectURI

        await assertThrows(.loginFailed) { try await broker.submitRedirect(account: "work", url: "http://localhost:50000/oauth2/callback/work?code=c&state=\(state)") }
        await assertThrows(.loginFailed) { try await broker.submitRedirect(account: "work", url: "\(redirect)?code=c") }
        let pending = await broker.status().accounts[0].loginPending
        XCTAssertTrue(pending, "a rejected paste does not end the sign-in")

        try await broker.submitRedirect(account: "work", url: "\(redirect)?code=the-code&state=\(state)")
        XCTAssertEqual(redirects.deliver("code=the-code&state=\(state)"), .invalid, "single use: the listener is too late")
        let outcome = try await broker.awaitLogin(ticket)
        XCTAssertEqual(outcome.email, "alice@example.test")
        XCTAssertEqual(http.tokenPosts.count, 1)
        XCTAssertEqual(http.tokenPosts.first?["code"], "the-code")
        XCTAssertEqual(http.tokenPosts.first?["redirect_uri"], redirect)
        await assertThrows(.loginFailed) { try await broker.submitRedirect(account: "work", url: "\(redirect)?code=the-code&state=\(state)") }
        XCTAssertEqual(http.tokenPosts.count, 1, "a replayed paste is not exchanged")
        await assertThrows(.unknownAccount) { try await broker.submitRedirect(account: "nope", url: redirect) }
    }

    func testListenerFirstMakesALaterPasteAReplay() async throws {
        let (http, redirects, browser) = (FakeHTTP(), FakeRedirects(), FakeBrowser())
        let broker = Fixtures.broker(http: http, redirects: redirects, browser: browser)
        let ticket = try await broker.beginLogin(account: "work", openBrowser: false)
        let query = LoginSession.parseQuery(ticket.authorizationURL.query ?? "")
        let state = try XCTUnwrap(query["state"]?.first)
        http.tokenReplies = [FakeHTTP.tokenReply(access: "at-1", refresh: "rt-1",
                                                 idToken: await Fixtures.signedIDToken(nonce: try XCTUnwrap(query["nonce"]?.first)))]
        XCTAssertEqual(redirects.deliver("code=the-code&state=\(state)"), .success)
        await assertThrows(.loginFailed) {
            try await broker.submitRedirect(account: "work", url: "\(ticket.redirectURI)?code=the-code&state=\(state)")
        }
        _ = try await broker.awaitLogin(ticket)
        XCTAssertEqual(http.tokenPosts.count, 1)
    }
}
