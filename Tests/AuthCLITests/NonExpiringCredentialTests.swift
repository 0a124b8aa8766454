import AgentIPC
@testable import AuthCLI
import XCTest

/// git and kubectl are never told an expiry for a token that has none (a GitHub OAuth app's): they keep using it
/// rather than drop it, or ask again, at a time the agent made up.
final class NonExpiringCredentialTests: XCTestCase {
    private func token(_ expiry: TokenExpiry, idToken: String? = nil) -> TokenResult {
        TokenResult(account: "gh", accessToken: "gho_x", tokenType: "Bearer", expiry: expiry, scopes: nil, idToken: idToken)
    }

    func testGitGetsNoPasswordExpiryForATokenThatDoesNotExpire() throws {
        let reply = GitCredentialReply(username: "oauth2", token: token(.never))
        XCTAssertEqual(try reply.encoded(), "username=oauth2\npassword=gho_x\n\n")
    }

    func testGitGetsTheExpiryOfATokenThatExpires() throws {
        let reply = GitCredentialReply(username: "oauth2", token: token(.after(seconds: 3599, unixTime: 1_800_003_599)))
        XCTAssertEqual(try reply.encoded(), "username=oauth2\npassword=gho_x\npassword_expiry_utc=1800003599\n\n")
    }

    func testKubectlGetsNoExpirationTimestampForATokenThatDoesNotExpire() throws {
        let outcome = KubeCredential.decide(kind: .accessToken, token: token(.never), now: 1_800_000_000, minValid: 60)
        guard case .credential(let credential) = outcome else { return XCTFail("\(outcome)") }
        XCTAssertNil(credential.status.expirationTimestamp)
        XCTAssertEqual(credential.json(),
                       #"{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"gho_x"}}"#)
    }

    func testKubectlGetsTheExpiryOfATokenThatExpires() {
        let outcome = KubeCredential.decide(kind: .accessToken, token: token(.after(seconds: 3600, unixTime: 1_800_003_600)),
                                            now: 1_800_000_000, minValid: 60)
        XCTAssertEqual(outcome, .credential(ExecCredential(token: "gho_x", expiresAt: 1_800_003_600)))
        if case .credential(let credential) = outcome {
            XCTAssertEqual(credential.status.expirationTimestamp, "2027-01-15T09:00:00Z")
        }
    }

    func testAnIDTokenWithoutReadableExpiryBesideANonExpiringAccessTokenCarriesNoExpiry() {
        let outcome = KubeCredential.decide(kind: .idToken, token: token(.never, idToken: "not-a-jwt"),
                                            now: 1_800_000_000, minValid: 60)
        XCTAssertEqual(outcome, .credential(ExecCredential(token: "not-a-jwt", expiresAt: nil)))
    }
}
