@testable import AuthCore
import Foundation
import XCTest

final class PKCEAndSessionTests: XCTestCase {
    func testVerifierIs43Base64URLCharactersAndChallengeIsS256() {
        let pkce = PKCE()
        XCTAssertEqual(pkce.verifier.reveal().count, 43)
        XCTAssertTrue(pkce.verifier.reveal().allSatisfy { $0.isLetter || $0.isNumber || $0 == "-" || $0 == "_" })
        XCTAssertNotEqual(PKCE().verifier.reveal(), pkce.verifier.reveal())
        // RFC 7636 Appendix B test vector.
        XCTAssertEqual(PKCE.challenge(for: "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"), "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM")
    }

    func testSecretNeverPrints() {
        let secret = Secret("s3cr3t-value")
        XCTAssertEqual("\(secret)", "<redacted>")
        XCTAssertEqual(String(describing: [secret]), "[<redacted>]")
        XCTAssertFalse(String(reflecting: secret).contains("s3cr3t"))
        var dumped = ""
        dump(secret, to: &dumped)
        XCTAssertFalse(dumped.contains("s3cr3t"))
    }

    func session(requiresIss: Bool = false, scopes: [String] = ["openid"]) -> LoginSession {
        let metadata = ProviderMetadata(issuer: Fixtures.issuer, authorizationEndpoint: URL(string: "https://issuer.example/authorize?tenant=x")!,
                                        tokenEndpoint: URL(string: "https://issuer.example/token")!, requiresIssInResponse: requiresIss)
        var account = Fixtures.account(scopes: scopes)
        account.extraAuthParams = ["prompt": "consent", "access_type": "offline"]
        return LoginSession(account: account, metadata: metadata, state: "the-state", nonce: "the-nonce")
    }

    func testAuthorizationURLCarriesPKCEStateNonceAndExtras() throws {
        let s = session()
        let url = s.authorizationURL(redirectURI: "http://127.0.0.1:4000/oauth2/callback/work")
        let components = try XCTUnwrap(URLComponents(url: url, resolvingAgainstBaseURL: false))
        let items = Dictionary(uniqueKeysWithValues: (components.queryItems ?? []).map { ($0.name, $0.value ?? "") })
        XCTAssertEqual(items["response_type"], "code")
        XCTAssertEqual(items["client_id"], "client-1")
        XCTAssertEqual(items["redirect_uri"], "http://127.0.0.1:4000/oauth2/callback/work")
        XCTAssertEqual(items["code_challenge_method"], "S256")
        XCTAssertEqual(items["code_challenge"], s.pkce.challenge)
        XCTAssertEqual(items["state"], "the-state")
        XCTAssertEqual(items["nonce"], "the-nonce")
        XCTAssertEqual(items["tenant"], "x", "query items already in the endpoint are kept")
        XCTAssertEqual(items["prompt"], "consent")
        XCTAssertNil(items["code_verifier"], "the verifier never goes to the browser")
        XCTAssertFalse(url.absoluteString.contains(s.pkce.verifier.reveal()))
    }

    func testNoNonceWithoutOpenID() throws {
        let s = session(scopes: ["read"])
        XCTAssertNil(s.nonce)
        XCTAssertFalse(s.authorizationURL(redirectURI: "http://127.0.0.1:4000/x").absoluteString.contains("nonce="))
    }

    func testFreshStateIs256BitsAndUnique() {
        let metadata = ProviderMetadata(issuer: Fixtures.issuer, authorizationEndpoint: Fixtures.issuer, tokenEndpoint: Fixtures.issuer)
        let a = LoginSession(account: Fixtures.account(), metadata: metadata)
        let b = LoginSession(account: Fixtures.account(), metadata: metadata)
        XCTAssertEqual(a.state.reveal().count, 43)
        XCTAssertNotEqual(a.state.reveal(), b.state.reveal())
        XCTAssertNotEqual(a.nonce?.reveal(), b.nonce?.reveal())
    }

    func testJudgeAcceptsOnlyMatchingState() {
        let s = session()
        XCTAssertEqual(s.judge(query: "code=abc&state=the-state"), .code(Secret("abc")))
        XCTAssertEqual(s.judge(query: "code=abc&state=wrong"), .rejected(reason: "state does not match"))
        XCTAssertEqual(s.judge(query: "code=abc"), .rejected(reason: "missing or repeated state"))
        XCTAssertEqual(s.judge(query: "code=abc&state=the-state&state=the-state"), .rejected(reason: "missing or repeated state"))
        XCTAssertEqual(s.judge(query: nil), .rejected(reason: "missing or repeated state"))
        XCTAssertEqual(s.judge(query: "state=the-state"), .rejected(reason: "missing or repeated code"))
        XCTAssertEqual(s.judge(query: "code=a&code=b&state=the-state"), .rejected(reason: "missing or repeated code"))
    }

    func testErrorCountsOnlyWithValidState() {
        let s = session()
        XCTAssertEqual(s.judge(query: "error=access_denied"), .rejected(reason: "missing or repeated state"))
        XCTAssertEqual(s.judge(query: "error=access_denied&state=nope"), .rejected(reason: "state does not match"))
        XCTAssertEqual(s.judge(query: "error=access_denied&error_description=User+said+no%3Cscript%3E&state=the-state"),
                       .denied(error: "access_denied", description: "User said no<script>"))
    }

    func testIssParameterRFC9207() {
        let strict = session(requiresIss: true)
        XCTAssertEqual(strict.judge(query: "code=abc&state=the-state"), .rejected(reason: "missing iss (RFC 9207)"))
        XCTAssertEqual(strict.judge(query: "code=abc&state=the-state&iss=https%3A%2F%2Fevil.example"),
                       .rejected(reason: "iss does not match the issuer (RFC 9207)"))
        XCTAssertEqual(strict.judge(query: "code=abc&state=the-state&iss=https%3A%2F%2Fissuer.example"), .code(Secret("abc")))
        // The configured issuer and the server's may differ by a trailing slash (discovery takes them as one server):
        // the response's iss is compared the same way, or every genuine response of such a server would be refused.
        var slashed = Fixtures.account()
        slashed.issuer = URL(string: "https://issuer.example/")!
        let metadata = ProviderMetadata(issuer: slashed.issuer, authorizationEndpoint: URL(string: "https://issuer.example/authorize")!,
                                        tokenEndpoint: URL(string: "https://issuer.example/token")!, requiresIssInResponse: true)
        let configuredWithSlash = LoginSession(account: slashed, metadata: metadata, state: "the-state",
                                               nonce: "the-nonce")
        XCTAssertEqual(configuredWithSlash.judge(query: "code=abc&state=the-state&iss=https%3A%2F%2Fissuer.example"), .code(Secret("abc")))
        XCTAssertEqual(configuredWithSlash.judge(query: "code=abc&state=the-state&iss=https%3A%2F%2Fissuer.example.evil"),
                       .rejected(reason: "iss does not match the issuer (RFC 9207)"))
        // Even when not advertised, a present but wrong iss is a mix-up signal.
        XCTAssertEqual(session().judge(query: "code=abc&state=the-state&iss=https%3A%2F%2Fevil.example"),
                       .rejected(reason: "iss does not match the issuer (RFC 9207)"))
    }

    func testEndpointPolicy() {
        XCTAssertNoThrow(try EndpointPolicy.validate("https://login.example.com/o").get())
        XCTAssertNoThrow(try EndpointPolicy.validate("http://127.0.0.1:8000/o").get())
        XCTAssertNoThrow(try EndpointPolicy.validate("http://[::1]:8000/o").get())
        for bad in ["http://localhost:8000", "http://example.com", "file:///etc/passwd", "javascript:alert(1)",
                    "--help", "-https://x", "https://user:pw@example.com", "https://exa mple.com", "https://x/$(touch /tmp/pwn) y",
                    "ftp://example.com", "https://", "example.com"] {
            XCTAssertThrowsError(try EndpointPolicy.validate(bad).get(), bad)
        }
    }
}
