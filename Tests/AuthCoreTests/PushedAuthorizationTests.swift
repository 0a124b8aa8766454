import AuthTestSupport
@testable import AuthCore
import Foundation
import XCTest

/// Pushed authorization requests (RFC 9126): every parameter goes in the push, the browser gets only `client_id` and
/// `request_uri`, `par` decides with the server's metadata, and `auto` falls back only when the push is refused for
/// this client. The same against a real server: Tests/e2e/test_dpop.py (and with Chromium, test_real_browser.py).
final class PushedAuthorizationTests: XCTestCase {
    func discovery(par: Bool = true, required: Bool = false, dpop: Bool = false) -> HTTPReply {
        var object: [String: Any] = [
            "issuer": "https://issuer.example", "authorization_endpoint": "https://issuer.example/authorize",
            "token_endpoint": "https://issuer.example/token", "jwks_uri": "https://issuer.example/jwks",
            "code_challenge_methods_supported": ["S256"],
        ]
        if par { object["pushed_authorization_request_endpoint"] = "https://issuer.example/par" }
        if required { object["require_pushed_authorization_requests"] = true }
        if dpop { object["dpop_signing_alg_values_supported"] = ["ES256"] }
        return HTTPReply(status: 200, body: Array(try! JSONSerialization.data(withJSONObject: object)))
    }

    static let pushed = HTTPReply(status: 201, body: Array(#"{"request_uri":"urn:ietf:params:oauth:request_uri:abc","expires_in":60}"#.utf8))

    func broker(_ http: FakeHTTP, _ browser: FakeBrowser, _ redirects: FakeRedirects = FakeRedirects(),
                account: AccountConfig = Fixtures.account(), metadata: HTTPReply,
                clock: ManualClock = ManualClock()) -> TokenBroker {
        let broker = Fixtures.broker(accounts: [account], http: http, redirects: redirects, browser: browser, clock: clock)
        http.discovery["https://issuer.example/.well-known/openid-configuration"] = metadata
        return broker
    }

    func testThePushCarriesEveryParameterAndTheBrowserOnlyTheRequestURI() async throws {
        let http = FakeHTTP(), browser = FakeBrowser(), redirects = FakeRedirects()
        http.parReplies = [PushedAuthorizationTests.pushed]
        let broker = broker(http, browser, redirects, metadata: discovery(dpop: true))
        let ticket = try await broker.beginLogin(account: "work")
        XCTAssertEqual(Set(browser.lastQuery.keys), ["client_id", "request_uri"], "nothing else goes through the browser")
        XCTAssertEqual(browser.lastQuery["request_uri"], ["urn:ietf:params:oauth:request_uri:abc"])
        XCTAssertEqual(ticket.authorizationURL.host, "issuer.example")
        XCTAssertEqual(ticket.authorizationURL.path, "/authorize")
        let push = try XCTUnwrap(http.parPosts.first?.fields)
        for name in ["response_type", "client_id", "redirect_uri", "scope", "state", "code_challenge",
                     "code_challenge_method", "nonce", "dpop_jkt"] {
            XCTAssertNotNil(push[name], "the push lacks \(name)")
        }
        XCTAssertEqual(push["code_challenge_method"], "S256")
        XCTAssertNil(push["request_uri"], "RFC 9126 §2.1: a push never carries request_uri")
        // The sign-in completes with the state and nonce that were pushed.
        let idToken = await Fixtures.signedIDToken(nonce: try XCTUnwrap(push["nonce"]))
        http.tokenReplies = [FakeHTTP.tokenReply(access: "at-1", refresh: "rt-1", idToken: idToken)]
        XCTAssertEqual(redirects.deliver("code=c&state=\(try XCTUnwrap(push["state"]))"), .success)
        let outcome = try await broker.awaitLogin(ticket)
        XCTAssertTrue(outcome.hasRefreshToken)
        XCTAssertEqual(http.tokenPosts.first?["code_verifier"].map(PKCE.challenge(for:)), push["code_challenge"])
    }

    func testACallerThatJoinsAfterTheRequestExpiredGetsAFreshlyPushedOne() async throws {
        let http = FakeHTTP(), browser = FakeBrowser(), clock = ManualClock()
        http.parReplies = [PushedAuthorizationTests.pushed]
        var account = Fixtures.account()
        account.loginTimeout = .seconds(300)  // the sign-in outlives its request_uri, not its own time limit
        let broker = broker(http, browser, account: account, metadata: discovery(), clock: clock)
        let first = try await broker.beginLogin(account: "work", openBrowser: false)
        let joined = try await broker.beginLogin(account: "work")
        XCTAssertEqual(joined.authorizationURL, first.authorizationURL, "still fresh: the same request")
        XCTAssertEqual(http.parPosts.count, 1)

        clock.advance(.seconds(61))
        http.parReplies = [HTTPReply(status: 201, body: Array(#"{"request_uri":"urn:ietf:params:oauth:request_uri:def","expires_in":60}"#.utf8))]
        let late = try await broker.beginLogin(account: "work")
        XCTAssertEqual(http.parPosts.count, 2, "an expired request_uri is pushed again, not shown")
        XCTAssertTrue(late.authorizationURL.absoluteString.contains("request_uri%3Adef")
                      || late.authorizationURL.absoluteString.contains("request_uri:def"), late.authorizationURL.absoluteString)
        XCTAssertEqual(http.parPosts[1].fields["state"], http.parPosts[0].fields["state"], "the same sign-in, pushed again")
        XCTAssertTrue(browser.opened.isEmpty, "a joining caller is shown the URL; no browser is started for it")
    }

    static func pushed(_ id: String) -> HTTPReply {
        HTTPReply(status: 201, body: Array(#"{"request_uri":"urn:ietf:params:oauth:request_uri:\#(id)","expires_in":60}"#.utf8))
    }

    func testARequestPushedAgainForALateJoinerServesTheJoinersAfterItUntilItExpires() async throws {
        let http = FakeHTTP(), browser = FakeBrowser(), clock = ManualClock()
        http.parReplies = [PushedAuthorizationTests.pushed("abc")]
        var account = Fixtures.account()
        account.loginTimeout = .seconds(300)
        let broker = broker(http, browser, account: account, metadata: discovery(), clock: clock)
        _ = try await broker.beginLogin(account: "work", openBrowser: false)

        // The first push expired: the first late joiner pushes again; the second is given that push, not its own.
        clock.advance(.seconds(61))
        http.parReplies = [PushedAuthorizationTests.pushed("def"), PushedAuthorizationTests.pushed("ghi")]
        let late = try await broker.beginLogin(account: "work")
        clock.advance(.seconds(30))
        let later = try await broker.beginLogin(account: "work")
        XCTAssertEqual(http.parPosts.count, 2, "one push per expiry, not one per joiner")
        XCTAssertEqual(later.authorizationURL, late.authorizationURL, "the request pushed again is still valid")
        XCTAssertEqual(URLComponents(url: later.authorizationURL, resolvingAgainstBaseURL: false)?
            .queryItems?.first { $0.name == "request_uri" }?.value, "urn:ietf:params:oauth:request_uri:def")

        // That one expired too (60 s after it was pushed): the next joiner pushes once more.
        clock.advance(.seconds(31))
        let last = try await broker.beginLogin(account: "work")
        XCTAssertEqual(http.parPosts.count, 3)
        XCTAssertEqual(URLComponents(url: last.authorizationURL, resolvingAgainstBaseURL: false)?
            .queryItems?.first { $0.name == "request_uri" }?.value, "urn:ietf:params:oauth:request_uri:ghi")
        XCTAssertEqual(Set(http.parPosts.map { $0.fields["state"] }).count, 1, "the same sign-in, pushed again each time")
    }

    func testAConfidentialClientAuthenticatesThePushAsAtTheTokenEndpoint() async throws {
        let http = FakeHTTP(), browser = FakeBrowser()
        http.parReplies = [PushedAuthorizationTests.pushed]
        let broker = broker(http, browser, account: Fixtures.account(secret: "s3cret"), metadata: discovery())
        _ = try await broker.beginLogin(account: "work")
        let push = try XCTUnwrap(http.parPosts.first)
        XCTAssertTrue(push.basic, "client_secret_basic, as at the token endpoint")
        XCTAssertEqual(push.fields["client_id"], "client-1")
        XCTAssertNil(push.fields["client_secret"])

        // client_secret_post: the secret in the push's body, as in the token request's; the account's extra
        // authorization parameters (a `resource`, RFC 8707) go in the push too, never through the browser.
        var account = Fixtures.account(secret: "s3cret")
        account.clientAuthMethod = .clientSecretPost
        account.extraAuthParams = ["resource": "https://api.example/"]
        let postHTTP = FakeHTTP(), postBrowser = FakeBrowser()
        postHTTP.parReplies = [PushedAuthorizationTests.pushed]
        let posting = self.broker(postHTTP, postBrowser, account: account, metadata: discovery())
        _ = try await posting.beginLogin(account: "work")
        let posted = try XCTUnwrap(postHTTP.parPosts.first)
        XCTAssertFalse(posted.basic)
        XCTAssertEqual(posted.fields["client_secret"], "s3cret")
        XCTAssertEqual(posted.fields["resource"], "https://api.example/")
        XCTAssertEqual(Set(postBrowser.lastQuery.keys), ["client_id", "request_uri"])
    }

    func testTheSettingAndTheServerDecide() async throws {
        // auto, no endpoint: the plain request.
        do {
            let http = FakeHTTP(), browser = FakeBrowser()
            _ = try await broker(http, browser, metadata: discovery(par: false)).beginLogin(account: "work")
            XCTAssertTrue(http.parPosts.isEmpty)
            XCTAssertNotNil(browser.lastQuery["code_challenge"])
        }
        // par = false against a server that offers it: the plain request; against one that requires it: an error.
        do {
            var account = Fixtures.account()
            account.par = .off
            let http = FakeHTTP(), browser = FakeBrowser()
            _ = try await broker(http, browser, account: account, metadata: discovery()).beginLogin(account: "work")
            XCTAssertTrue(http.parPosts.isEmpty)
            let strict = broker(FakeHTTP(), FakeBrowser(), account: account, metadata: discovery(required: true))
            await assertThrows(.invalidConfig) { _ = try await strict.beginLogin(account: "work") }
        }
        // par = true without an endpoint: an error before any browser opens.
        do {
            var account = Fixtures.account()
            account.par = .required
            let browser = FakeBrowser()
            let none = broker(FakeHTTP(), browser, account: account, metadata: discovery(par: false))
            await assertThrows(.invalidConfig) { _ = try await none.beginLogin(account: "work") }
            XCTAssertTrue(browser.opened.isEmpty)
        }
    }

    func testAutoFallsBackOnlyWhenThePushIsRefusedForThisClient() async throws {
        // Refused for this client, not required: the plain request, said in the journal.
        do {
            let http = FakeHTTP(), browser = FakeBrowser()
            http.parReplies = [FakeHTTP.errorReply(400, "unauthorized_client")]
            _ = try await broker(http, browser, metadata: discovery()).beginLogin(account: "work")
            XCTAssertEqual(http.parPosts.count, 1)
            XCTAssertNotNil(browser.lastQuery["code_challenge"], "the plain request after a refused push")
        }
        // The same refusal when the server requires pushed requests: the sign-in's error.
        do {
            let http = FakeHTTP(), browser = FakeBrowser()
            http.parReplies = [FakeHTTP.errorReply(400, "unauthorized_client")]
            await assertThrows(.invalidClient) {
                _ = try await self.broker(http, browser, metadata: self.discovery(required: true)).beginLogin(account: "work")
            }
            XCTAssertTrue(browser.opened.isEmpty)
        }
        // A server outage or a broken answer is no reason to fall back: errors like the token endpoint's.
        for (reply, code) in [(HTTPReply(status: 503, body: []), AuthError.Code.serverError),
                              (HTTPReply(status: 201, body: Array(#"{"expires_in":60}"#.utf8)), .invalidTokenResponse)] {
            let http = FakeHTTP(), browser = FakeBrowser()
            http.parReplies = [reply]
            await assertThrows(code) {
                _ = try await self.broker(http, browser, metadata: self.discovery()).beginLogin(account: "work")
            }
            XCTAssertTrue(browser.opened.isEmpty)
        }
    }

    func testAPushErrorIsReportedAsTheTokenEndpointsAreAndNamesThePushEndpoint() async throws {
        let http = FakeHTTP(), browser = FakeBrowser()
        http.parReplies = [HTTPReply(status: 400, body: Array(#"{"error":"invalid_request","error_description":"bad scope"}"#.utf8))]
        do {
            _ = try await broker(http, browser, metadata: discovery()).beginLogin(account: "work")
            XCTFail("the push's error was not reported")
        } catch {
            XCTAssertEqual(error.code, .serverError)
            XCTAssertTrue(error.message.contains("the pushed authorization request endpoint answered HTTP 400 (invalid_request: bad scope)"),
                          error.message)
        }
        XCTAssertTrue(browser.opened.isEmpty)
    }

    /// `par = true` leaves the sign-ins that take no authorization request through a browser's URL, or take it another
    /// way, working: the device grant (nothing to push), the manual paste (the URL to open is the pushed one) and a
    /// private-use scheme redirect (pushed as the redirect_uri).
    func testWithParTrueTheDeviceGrantThePasteAndASchemeRedirectStillSignIn() async throws {
        do {
            var account = DeviceLoginTests.deviceAccount()
            account.par = .required
            let http = FakeHTTP(), browser = FakeBrowser()
            let broker = broker(http, browser, account: account, metadata: discovery(required: true))
            http.tokenReplies = [DeviceLoginTests.authorization(),
                                 FakeHTTP.tokenReply(access: "at-1", refresh: "rt-1", idToken: await Fixtures.signedIDToken(nonce: nil))]
            let ticket = try await broker.beginLogin(account: "work", method: .device)
            let outcome = try await broker.awaitLogin(ticket)
            XCTAssertTrue(outcome.hasRefreshToken)
            XCTAssertTrue(http.parPosts.isEmpty, "the device grant has no authorization request to push")
        }
        do {
            var account = Fixtures.account()
            account.par = .required
            let http = FakeHTTP(), browser = FakeBrowser()
            http.parReplies = [PushedAuthorizationTests.pushed]
            let broker = broker(http, browser, account: account, metadata: discovery())
            let ticket = try await broker.beginLogin(account: "work", openBrowser: false)
            XCTAssertTrue(browser.opened.isEmpty)
            XCTAssertEqual(Set(LoginSession.parseQuery(ticket.authorizationURL.query ?? "").keys), ["client_id", "request_uri"],
                           "the URL to open by hand is the pushed one")
            let push = try XCTUnwrap(http.parPosts.first?.fields)
            http.tokenReplies = [FakeHTTP.tokenReply(access: "at-1", refresh: "rt-1",
                                                     idToken: await Fixtures.signedIDToken(nonce: try XCTUnwrap(push["nonce"])))]
            try await broker.submitRedirect(account: "work", url: "\(ticket.redirectURI)?code=c&state=\(try XCTUnwrap(push["state"]))")
            let outcome = try await broker.awaitLogin(ticket)
            XCTAssertTrue(outcome.hasRefreshToken)
        }
        do {
            let uri = "com.example.app:/oauth2/callback/work"
            var account = Fixtures.account(scopes: [])
            account.par = .required
            account.privateUseRedirect = try PrivateUseRedirect.parse(uri).get()
            let http = FakeHTTP(), browser = FakeBrowser()
            http.parReplies = [PushedAuthorizationTests.pushed]
            let broker = broker(http, browser, account: account, metadata: discovery())
            let ticket = try await broker.beginLogin(account: "work")
            XCTAssertEqual(Set(browser.lastQuery.keys), ["client_id", "request_uri"])
            let push = try XCTUnwrap(http.parPosts.first?.fields)
            XCTAssertEqual(push["redirect_uri"], uri)
            http.tokenReplies = [FakeHTTP.tokenReply(access: "at-1", refresh: "rt-1")]
            try await broker.submitRedirect(account: "work", url: "\(uri)?code=c&state=\(try XCTUnwrap(push["state"]))")
            let outcome = try await broker.awaitLogin(ticket)
            XCTAssertTrue(outcome.hasRefreshToken)
            XCTAssertEqual(http.tokenPosts.first?["redirect_uri"], uri)
        }
    }
}
