@testable import AuthCLI
import Foundation
import XCTest

final class KubeCredentialTests: XCTestCase {
    /// An unsigned JWT-shaped token with the given payload (signatures are not read here).
    private func jwt(_ payload: String) -> String {
        func b64url(_ text: String) -> String {
            Data(text.utf8).base64EncodedString().replacingOccurrences(of: "+", with: "-")
                .replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
        }
        return "\(b64url(#"{"alg":"RS256"}"#)).\(b64url(payload)).c2ln"
    }

    func testRFC3339IsUTCWithSecondsAndZ() {
        XCTAssertEqual(RFC3339.utc(unixSeconds: 0), "1970-01-01T00:00:00Z")
        XCTAssertEqual(RFC3339.utc(unixSeconds: 1_800_000_000), "2027-01-15T08:00:00Z")
        XCTAssertEqual(RFC3339.utc(unixSeconds: 951_782_400), "2000-02-29T00:00:00Z", "leap day of a century leap year")
        XCTAssertEqual(RFC3339.utc(unixSeconds: 4_107_542_399), "2100-02-28T23:59:59Z", "2100 is not a leap year")
        XCTAssertEqual(RFC3339.utc(unixSeconds: -1), "1969-12-31T23:59:59Z")
        XCTAssertEqual(RFC3339.utc(unixSeconds: .max), "9999-12-31T23:59:59Z", "four-digit years: clamped")
        XCTAssertEqual(RFC3339.utc(unixSeconds: .min), "1000-01-01T00:00:00Z")
        // Cross-check a spread of instants against Foundation's formatter.
        let formatter = ISO8601DateFormatter()
        formatter.timeZone = TimeZone(identifier: "UTC")
        for seconds in stride(from: 0, to: 4_200_000_000, by: 86_399 * 97 + 12_345) {
            XCTAssertEqual(RFC3339.utc(unixSeconds: seconds), formatter.string(from: Date(timeIntervalSince1970: TimeInterval(seconds))))
        }
    }

    func testExecCredentialIsTheV1ShapeKubectlReads() throws {
        let json = ExecCredential(token: "ID.TOKEN/x", expiresAt: 1_800_000_000).json()
        XCTAssertEqual(json, #"{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"expirationTimestamp":"2027-01-15T08:00:00Z","token":"ID.TOKEN/x"}}"#)
        XCTAssertFalse(json.contains("\n"))
    }

    func testJWTExpiryIsReadFromThePayload() {
        XCTAssertEqual(JWTClaims.expiry(of: jwt(#"{"iss":"x","exp":1800000123}"#)), 1_800_000_123)
        XCTAssertEqual(JWTClaims.expiry(of: jwt(#"{"exp":1800000123.9}"#)), 1_800_000_123, "NumericDate may be fractional")
        XCTAssertNil(JWTClaims.expiry(of: jwt(#"{"iss":"x"}"#)))
        XCTAssertNil(JWTClaims.expiry(of: jwt(#"{"exp":"tomorrow"}"#)))
        XCTAssertNil(JWTClaims.expiry(of: jwt(#"{"exp":-5}"#)))
        XCTAssertNil(JWTClaims.expiry(of: "opaque-access-token"))
        XCTAssertNil(JWTClaims.expiry(of: "a.!!!.c"))
        XCTAssertNil(JWTClaims.expiry(of: "a..c"))
    }

    func testDefaultIsTheIDTokenWithItsOwnExpiry() {
        let id = jwt(#"{"exp":1800000900}"#)
        let outcome = KubeCredential.decide(kind: .idToken, accessToken: "AT", accessTokenExpiresAt: 1_800_003_600,
                                            idToken: id, now: 1_800_000_000, minValid: 60)
        XCTAssertEqual(outcome, .credential(ExecCredential(token: id, expiresAt: 1_800_000_900)))
    }

    func testAccessTokenKindUsesTheAccessTokensExpiry() {
        let outcome = KubeCredential.decide(kind: .accessToken, accessToken: "AT", accessTokenExpiresAt: 1_800_003_600,
                                            idToken: nil, now: 1_800_000_000, minValid: 60)
        XCTAssertEqual(outcome, .credential(ExecCredential(token: "AT", expiresAt: 1_800_003_600)))
    }

    func testAStaleOrMissingIDTokenIsNotHandedToKubectl() {
        let stale = jwt(#"{"exp":1800000030}"#)
        XCTAssertEqual(KubeCredential.decide(kind: .idToken, accessToken: "AT", accessTokenExpiresAt: 1_800_003_600,
                                             idToken: stale, now: 1_800_000_000, minValid: 60),
                       .idTokenStale(expiresAt: 1_800_000_030), "expires within min_valid")
        XCTAssertEqual(KubeCredential.decide(kind: .idToken, accessToken: "AT", accessTokenExpiresAt: 1_800_003_600,
                                             idToken: nil, now: 1_800_000_000, minValid: 60), .noIDToken)
        XCTAssertEqual(KubeCredential.decide(kind: .idToken, accessToken: "AT", accessTokenExpiresAt: 1_800_003_600,
                                             idToken: "not-a-jwt", now: 1_800_000_000, minValid: 60),
                       .credential(ExecCredential(token: "not-a-jwt", expiresAt: 1_800_003_600)),
                       "an unreadable exp falls back to the access token's expiry")
    }
}
