import AuthTestSupport
@testable import AuthCore
import Foundation
import XCTest

/// The device authorization grant through the broker: method choice, the requests it sends, the keyring, the
/// governor. The server's interval is 0 here so nothing waits; the spacing rules are in DevicePollingTests.
final class DeviceLoginTests: XCTestCase {
    let key = SecretKey(Fixtures.account())

    static func deviceAccount(scopes: [String] = ["openid", "email"]) -> AccountConfig {
        var account = Fixtures.account(scopes: scopes)
        account.deviceAuthorizationEndpoint = URL(string: "https://issuer.example/device")!
        return account
    }

    static func authorization(interval: Int = 0, expiresIn: Int = 600) -> HTTPReply {
        let object: [String: Any] = ["device_code": "dc-secret", "user_code": "WDJB-MJHT", "interval": interval,
                                     "verification_uri": "https://issuer.example/activate", "expires_in": expiresIn]
        return HTTPReply(status: 200, body: Array(try! JSONSerialization.data(withJSONObject: object)))
    }

    func testDeviceSignInPollsThenStoresTheRefreshTokenLikeTheBrowserFlow() async throws {
        let store = MemorySecretStore()
        let http = FakeHTTP()
        let browser = FakeBrowser()
        let redirects = FakeRedirects()
        http.tokenReplies = [Self.authorization(), FakeHTTP.errorReply(400, "authorization_pending"),
                             FakeHTTP.errorReply(400, "authorization_pending"),
                             FakeHTTP.tokenReply(access: "at-1", refresh: "rt-1")]
        let broker = Fixtures.broker(accounts: [Self.deviceAccount()], store: store, http: http, redirects: redirects,
                                     browser: browser)
        // The device authorization request is held at the endpoint until the second caller has arrived, so that
        // caller finds the device sign-in pending (and started first, whatever order the tasks run in).
        let gate = TokenGate()
        http.tokenGate = gate
        // And the polls answer after a moment, so the sign-in is still pending when the second caller joins it.
        http.tokenDelay = .milliseconds(20)
        let first = Task { try await broker.beginLogin(account: "work", method: .device) }
        await gate.arrived(1)
        let second = Task { try await broker.beginLogin(account: "work") }
        gate.open()
        let (ticket, joined) = try await (first.value, second.value)
        let device = try XCTUnwrap(ticket.device)
        XCTAssertEqual(device.userCode, "WDJB-MJHT")
        XCTAssertEqual(device.verificationURI.absoluteString, "https://issuer.example/activate")
        XCTAssertEqual(device.interval, 0)
        XCTAssertEqual(joined.loginID, ticket.loginID, "a second caller joins the pending device sign-in")
        let outcome = try await broker.awaitLogin(ticket)
        XCTAssertTrue(outcome.hasRefreshToken)

        XCTAssertEqual(browser.opened.count, 0, "no browser for a device sign-in")
        XCTAssertEqual(redirects.opened, 0, "no loopback listener for a device sign-in")
        let authorize = try XCTUnwrap(http.posts.first)
        XCTAssertEqual(authorize.url.absoluteString, "https://issuer.example/device")
        XCTAssertEqual(authorize.fields, ["client_id": "client-1", "scope": "openid email"])
        let polls = http.tokenPosts
        XCTAssertEqual(polls.count, 3)
        XCTAssertEqual(Set(polls), [["grant_type": "urn:ietf:params:oauth:grant-type:device_code",
                                     "device_code": "dc-secret", "client_id": "client-1"]])
        let stored = await store.items[key]
        XCTAssertEqual(stored?.reveal(), "rt-1")
        let token = try await broker.accessToken(account: "work")
        XCTAssertEqual(token.accessToken.reveal(), "at-1")
    }

    func testDeviceIDTokenIsVerifiedWithoutANonce() async throws {
        let http = FakeHTTP()
        let forged = Fixtures.idToken(nonce: nil)
        http.tokenReplies = [Self.authorization(), FakeHTTP.tokenReply(access: "at-1", refresh: "rt-1", idToken: forged)]
        let store = MemorySecretStore()
        let broker = Fixtures.broker(accounts: [Self.deviceAccount()], store: store, http: http)
        let ticket = try await broker.beginLogin(account: "work", method: .device)
        await assertThrows(.invalidIDToken) { _ = try await broker.awaitLogin(ticket) }
        let stored = await store.items[key]
        XCTAssertNil(stored, "a sign-in with a forged ID token stores nothing")

        let good = await Fixtures.signedIDToken(nonce: nil)
        http.tokenReplies = [Self.authorization(), FakeHTTP.tokenReply(access: "at-2", refresh: "rt-2", idToken: good)]
        let second = try await broker.beginLogin(account: "work", method: .device)
        let outcome = try await broker.awaitLogin(second)
        XCTAssertEqual(outcome.subject, "alice")
    }

    func testDeniedAndExpiredEndTheSignInWithTheirCodes() async throws {
        for (error, code) in [("access_denied", AuthError.Code.accessDenied), ("expired_token", .loginTimeout),
                              ("invalid_client", .invalidClient)] {
            let http = FakeHTTP()
            http.tokenReplies = [Self.authorization(), FakeHTTP.errorReply(400, "authorization_pending"),
                                 FakeHTTP.errorReply(400, error)]
            let broker = Fixtures.broker(accounts: [Self.deviceAccount()], http: http)
            let ticket = try await broker.beginLogin(account: "work", method: .device)
            await assertThrows(code) { _ = try await broker.awaitLogin(ticket) }
            XCTAssertEqual(http.tokenPosts.count, 2, "\(error) stops the polling")
        }
    }

    func testMethodChoice() async throws {
        // Forced device without a device endpoint: a clear error, no browser.
        let browser = FakeBrowser()
        let plain = Fixtures.broker(browser: browser)
        await assertThrows(.deviceGrantUnsupported) { _ = try await plain.beginLogin(account: "work", method: .device) }
        // prefer_device without the grant: the browser flow.
        let ticket = try await plain.beginLogin(account: "work", method: .preferDevice)
        XCTAssertNil(ticket.device)
        XCTAssertEqual(browser.opened.count, 1)

        // prefer_device with the grant: device, no browser.
        let http = FakeHTTP()
        http.tokenReplies = [Self.authorization()]
        let otherBrowser = FakeBrowser()
        let broker = Fixtures.broker(accounts: [Self.deviceAccount()], http: http, browser: otherBrowser)
        let device = try await broker.beginLogin(account: "work", method: .preferDevice)
        XCTAssertNotNil(device.device)
        XCTAssertEqual(otherBrowser.opened.count, 0)
    }

    func testBrowserFailureFallsBackToTheDeviceGrantWhenOffered() async throws {
        let http = FakeHTTP()
        http.tokenReplies = [Self.authorization()]
        let browser = FakeBrowser()
        browser.fails = true
        let redirects = FakeRedirects()
        let broker = Fixtures.broker(accounts: [Self.deviceAccount()], http: http, redirects: redirects, browser: browser)
        let ticket = try await broker.beginLogin(account: "work")
        XCTAssertEqual(ticket.device?.userCode, "WDJB-MJHT")
        XCTAssertEqual(redirects.closed, 1, "the loopback listener is closed when the device grant takes over")

        // With --no-browser (paste) there is no fallback: the person asked to paste.
        let pasteHTTP = FakeHTTP()
        let paste = Fixtures.broker(accounts: [Self.deviceAccount()], http: pasteHTTP, browser: browser)
        let pasteTicket = try await paste.beginLogin(account: "work", openBrowser: false)
        XCTAssertNil(pasteTicket.device)
    }

    func testDeviceMetadataComesFromDiscoveryOrConfig() throws {
        var body = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(Fixtures.discoveryBody)) as? [String: Any])
        body["device_authorization_endpoint"] = "https://issuer.example/device"
        let parsed = try ProviderMetadata.parse(Array(try JSONSerialization.data(withJSONObject: body)), expectedIssuer: Fixtures.issuer)
        XCTAssertEqual(parsed.deviceAuthorizationEndpoint?.absoluteString, "https://issuer.example/device")
        body["device_authorization_endpoint"] = "http://issuer.example/device"
        XCTAssertThrowsError(try ProviderMetadata.parse(Array(try JSONSerialization.data(withJSONObject: body)),
                                                        expectedIssuer: Fixtures.issuer)) {
            XCTAssertEqual(($0 as? AuthError)?.code, .insecureEndpoint)
        }
        let resolved = try ProviderMetadata.resolve(nil, for: {
            var account = Self.deviceAccount()
            account.authorizationEndpoint = URL(string: "https://issuer.example/authorize")
            account.tokenEndpoint = URL(string: "https://issuer.example/token")
            return account
        }())
        XCTAssertEqual(resolved.deviceAuthorizationEndpoint?.absoluteString, "https://issuer.example/device")
    }
}
