@testable import AuthCore
import Foundation
import XCTest

final class ParsingTests: XCTestCase {
    let now = ContinuousClock.now

    func reply(_ json: String, status: Int = 200, retryAfter: String? = nil) -> HTTPReply {
        HTTPReply(status: status, body: Array(json.utf8), retryAfter: retryAfter)
    }

    func testGoodTokenResponse() throws {
        let set = try TokenResponseParser.parse(reply(#"{"access_token":"at","token_type":"bearer","expires_in":60,"refresh_token":"rt","scope":"a b"}"#), receivedAt: now)
        XCTAssertEqual(set.accessToken.reveal(), "at")
        XCTAssertEqual(set.refreshToken?.reveal(), "rt")
        XCTAssertEqual(set.expiresAt, now + .seconds(60))
        XCTAssertEqual(set.scopes, ["a", "b"])
        let stringExpiry = try TokenResponseParser.parse(reply(#"{"access_token":"at","token_type":"Bearer","expires_in":"120"}"#), receivedAt: now)
        XCTAssertEqual(stringExpiry.lifetime, .seconds(120))
        // No expires_in but a refresh token: the usual hour is assumed (the refresh token renews it). Neither
        // (a GitHub OAuth app) is the non-expiring case (ProviderQuirkTests).
        let noExpiry = try TokenResponseParser.parse(reply(#"{"access_token":"at","token_type":"Bearer","refresh_token":"rt"}"#), receivedAt: now)
        XCTAssertEqual(noExpiry.lifetime, TokenResponseParser.defaultLifetime)
        XCTAssertFalse(noExpiry.nonExpiring)
    }

    func testMalformedTokenResponsesFail() {
        let cases = [
            "<html>hello</html>",
            #"{"token_type":"Bearer","expires_in":60}"#,
            #"{"access_token":"","token_type":"Bearer"}"#,
            #"{"access_token":"at","token_type":"mac","expires_in":60}"#,
            #"{"access_token":"at","expires_in":60}"#,
            #"{"access_token":"at","token_type":"Bearer","expires_in":-5}"#,
            #"{"access_token":"at","token_type":"Bearer","expires_in":0}"#,
            #"{"access_token":"at","token_type":"Bearer","expires_in":99999999999}"#,
            #"{"access_token":"at","token_type":"Bearer","expires_in":1000000000000000000000000000000}"#,
            #"{"access_token":"at","token_type":"Bearer","expires_in":1e300}"#,
            #"{"access_token":"at","token_type":"Bearer","expires_in":"99999999999999999999999"}"#,
            #"{"access_token":"at","token_type":"Bearer","expires_in":1.5}"#,
            #"{"access_token":"at","token_type":"Bearer","expires_in":true}"#,
            #"{"access_token":"at","token_type":"Bearer","expires_in":"soon"}"#,
            #"{"access_token":42,"token_type":"Bearer"}"#,
            #"["access_token"]"#,
        ]
        for body in cases {
            XCTAssertThrowsError(try TokenResponseParser.parse(reply(body), receivedAt: now), body) { error in
                XCTAssertEqual((error as? AuthError)?.code, .invalidTokenResponse, body)
            }
        }
    }

    func testOversizedBodiesAreMalformedResponsesUnlessTheStatusSaysOutage() {
        // The transport stops reading at its cap and hands over an empty body marked too large.
        let capped = HTTPReply(status: 200, body: [], bodyTooLarge: true)
        XCTAssertThrowsError(try TokenResponseParser.parse(capped, receivedAt: now)) { error in
            XCTAssertEqual((error as? AuthError)?.code, .invalidTokenResponse)
            XCTAssertTrue("\(error)".contains("too large"), "\(error)")
        }
        let outage = HTTPReply(status: 503, body: [], bodyTooLarge: true)
        XCTAssertThrowsError(try TokenResponseParser.parse(outage, receivedAt: now)) { error in
            XCTAssertEqual((error as? AuthError)?.code, .serverError)
        }
    }

    func testErrorClassification() {
        XCTAssertEqual(TokenResponseParser.error(from: reply(#"{"error":"invalid_grant"}"#, status: 400)).code, .loginRequired)
        XCTAssertEqual(TokenResponseParser.error(from: reply(#"{"error":"invalid_client"}"#, status: 401)).code, .invalidClient)
        XCTAssertEqual(TokenResponseParser.error(from: reply(#"{"error":"invalid_scope"}"#, status: 400)).code, .invalidScope)
        XCTAssertEqual(TokenResponseParser.error(from: reply(#"{"error":"invalid_target"}"#, status: 400)).code, .invalidTarget)
        XCTAssertEqual(TokenResponseParser.error(from: reply(#"{"error":"unsupported_grant_type"}"#, status: 400)).code, .serverError)
        let throttled = TokenResponseParser.error(from: reply("slow down", status: 429, retryAfter: "30"))
        XCTAssertEqual(throttled.code, .serverError)
        XCTAssertEqual(throttled.retryAfter, 30)
        XCTAssertEqual(TokenResponseParser.error(from: reply("oops", status: 503)).code, .serverError)
        // A hostile error_description is cleaned before it reaches a person.
        let hostile = TokenResponseParser.error(from: reply(#"{"error":"x","error_description":"a\u001b[31mb\nc"}"#, status: 400))
        XCTAssertFalse(hostile.message.contains("\u{1B}"))
        XCTAssertFalse(hostile.message.contains("\n"))
    }

    func testMetadataValidation() throws {
        let issuer = URL(string: "https://issuer.example")!
        let good = try ProviderMetadata.parse(Fixtures.discoveryBody, expectedIssuer: issuer)
        XCTAssertEqual(good.tokenEndpoint.absoluteString, "https://issuer.example/token")
        XCTAssertEqual(good.revocationEndpoint?.absoluteString, "https://issuer.example/revoke")
        // Each failure has its own code (and so its own message and hint).
        let bad: [(String, AuthError.Code)] = [
            (#"{"issuer":"https://evil.example","authorization_endpoint":"https://issuer.example/a","token_endpoint":"https://issuer.example/t"}"#, .issuerMismatch),
            (#"{"issuer":"https://issuer.example","authorization_endpoint":"http://issuer.example/a","token_endpoint":"https://issuer.example/t"}"#, .insecureEndpoint),
            (#"{"issuer":"https://issuer.example","authorization_endpoint":"https://issuer.example/a","token_endpoint":"https://issuer.example/t","device_authorization_endpoint":"http://issuer.example/d"}"#, .insecureEndpoint),
            (#"{"issuer":"https://issuer.example","token_endpoint":"https://issuer.example/t"}"#, .invalidMetadata),
            (#"{"issuer":"https://issuer.example","authorization_endpoint":"https://issuer.example/a","token_endpoint":"https://issuer.example/t","code_challenge_methods_supported":["plain"]}"#, .pkceUnsupported),
            ("not json", .invalidMetadata),
        ]
        for (body, code) in bad {
            XCTAssertThrowsError(try ProviderMetadata.parse(Array(body.utf8), expectedIssuer: issuer), body) {
                XCTAssertEqual(($0 as? AuthError)?.code, code, body)
            }
        }
    }

    func testDiscoveryURLs() {
        XCTAssertEqual(ProviderMetadata.discoveryURLs(for: URL(string: "http://127.0.0.1:8000/o")!).map(\.absoluteString),
                       ["http://127.0.0.1:8000/o/.well-known/openid-configuration",
                        "http://127.0.0.1:8000/.well-known/oauth-authorization-server/o"])
        XCTAssertEqual(ProviderMetadata.discoveryURLs(for: URL(string: "https://accounts.google.com")!).map(\.absoluteString),
                       ["https://accounts.google.com/.well-known/openid-configuration",
                        "https://accounts.google.com/.well-known/oauth-authorization-server"])
    }

    func testIDTokenClaims() throws {
        let now = Date(timeIntervalSince1970: 1_800_000_100)
        let nonce = Secret("n-1")
        let claims = try IDTokenClaims.validate(Secret(Fixtures.idToken(nonce: "n-1")), issuer: Fixtures.issuer, clientID: "client-1", nonce: nonce, now: now)
        XCTAssertEqual(claims.email, "alice@example.test")
        let bad: [String] = [
            Fixtures.idToken(nonce: "other"),
            Fixtures.idToken(nonce: nil),
            Fixtures.idToken(nonce: "n-1", aud: "someone-else"),
            Fixtures.idToken(nonce: "n-1", aud: ["client-1", "other"]),
            Fixtures.idToken(nonce: "n-1", iss: "https://evil.example"),
            Fixtures.idToken(nonce: "n-1", exp: 1_799_000_000),
            Fixtures.idToken(nonce: "n-1", alg: "none", signature: ""),
            "not.a.jwt",
        ]
        for token in bad {
            XCTAssertThrowsError(try IDTokenClaims.validate(Secret(token), issuer: Fixtures.issuer, clientID: "client-1", nonce: nonce, now: now)) {
                XCTAssertEqual(($0 as? AuthError)?.code, .invalidIDToken)
            }
        }
    }

    func testRefreshPolicy() {
        let policy = RefreshPolicy(minimumRemaining: .seconds(10))
        let t0 = ContinuousClock.now
        let hour = Duration.seconds(3600)
        XCTAssertTrue(policy.isFresh(expiresAt: t0 + .seconds(60), lifetime: hour, now: t0, minValid: .zero))
        XCTAssertFalse(policy.isFresh(expiresAt: t0 + .seconds(9), lifetime: hour, now: t0, minValid: .zero))
        XCTAssertFalse(policy.isFresh(expiresAt: t0 + .seconds(60), lifetime: hour, now: t0, minValid: .seconds(61)))
        XCTAssertTrue(policy.isFresh(expiresAt: t0 + .seconds(60), lifetime: hour, now: t0, minValid: .seconds(60)))
    }
}
