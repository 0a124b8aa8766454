@testable import AuthCore
import Foundation
import XCTest

/// Signature verification against a JWKS (OIDC Core §3.1.3.7, SECURITY.md 4), with keys made for this run.
final class IDTokenVerifierTests: XCTestCase {
    let verifier = IDTokenVerifier(issuer: Fixtures.issuer, clientID: "client-1")
    let now = Date(timeIntervalSince1970: 1_800_000_100)

    /// A key source that serves `sets` in turn and counts every request (`refetch` flags included).
    final class Keys: @unchecked Sendable {
        private let lock = NSLock()
        private var sets: [[UInt8]]
        private(set) var requests: [Bool] = []
        init(_ sets: [UInt8]...) { self.sets = sets }
        var source: IDTokenVerifier.KeySource {
            { (refetch: Bool) async throws(AuthError) -> JSONWebKeySet in
                let body = self.lock.withLock { () -> [UInt8] in
                    self.requests.append(refetch)
                    return self.sets.count > 1 ? self.sets.removeFirst() : self.sets[0]
                }
                return try JSONWebKeySet.parse(body)
            }
        }
    }

    func verify(_ token: String, keys: Keys = Keys(TestKeys.defaultJWKS), nonce: String? = "n-1",
                original: IDTokenClaims? = nil) async throws -> IDTokenClaims {
        try await verifier.verify(Secret(token), nonce: nonce.map(Secret.init), original: original, now: now, keys: keys.source)
    }

    func assertRejected(_ token: String, keys: Keys = Keys(TestKeys.defaultJWKS), nonce: String? = "n-1", original: IDTokenClaims? = nil,
                        _ fragment: String, file: StaticString = #filePath, line: UInt = #line) async {
        do {
            _ = try await verify(token, keys: keys, nonce: nonce, original: original)
            XCTFail("accepted a token that should fail with '\(fragment)'", file: file, line: line)
        } catch {
            XCTAssertEqual((error as? AuthError)?.code, .invalidIDToken, "\(error)", file: file, line: line)
            XCTAssertTrue("\(error)".contains(fragment), "\(error) lacks '\(fragment)'", file: file, line: line)
        }
    }

    func testGoodTokensVerify() async throws {
        let keys = Keys(TestKeys.defaultJWKS)
        let rs256 = try await verify(await TestKeys.sign(.init(nonce: "n-1")), keys: keys)
        XCTAssertEqual(rs256.subject, "alice")
        XCTAssertEqual(rs256.email, "alice@example.test")
        XCTAssertEqual(keys.requests, [false], "a known key needs no refetch")
        let es256 = try await verify(await TestKeys.sign(.init(nonce: "n-1"), kid: "ec-1", with: .es256))
        XCTAssertEqual(es256.subject, "alice")
        // PS256 with a key that names no alg; and a token without kid against a one-key set.
        let pssKeys = Keys(TestKeys.jwks([TestKeys.jwk(rsa: TestKeys.rsa, kid: "rsa-1", alg: nil)]))
        _ = try await verify(await TestKeys.sign(.init(nonce: "n-1"), with: .ps256), keys: pssKeys)
        _ = try await verify(await TestKeys.sign(.init(nonce: "n-1"), kid: nil), keys: pssKeys)
    }

    func testBadSignatureIsRejectedWithoutRefetch() async {
        let keys = Keys(TestKeys.defaultJWKS)
        let forged = await TestKeys.sign(.init(nonce: "n-1"), rsaKey: TestKeys.otherRSA)
        await assertRejected(forged, keys: keys, "signature does not verify")
        XCTAssertEqual(keys.requests, [false])
        // A genuine signature over other claims: swap the payload of a good token.
        let good = await TestKeys.sign(.init(nonce: "n-1")).split(separator: ".")
        let evil = await TestKeys.sign(.init(sub: "mallory", nonce: "n-1"), rsaKey: TestKeys.otherRSA).split(separator: ".")
        await assertRejected("\(good[0]).\(evil[1]).\(good[2])", "signature does not verify")
    }

    func testUnknownKidRefetchesOnceThenFails() async {
        let keys = Keys(TestKeys.defaultJWKS)
        await assertRejected(await TestKeys.sign(.init(nonce: "n-1"), kid: "rotated-away"), keys: keys, "does not list")
        XCTAssertEqual(keys.requests, [false, true], "one refetch, no more")
    }

    func testUnknownKidFoundAfterRotation() async throws {
        let rotated = TestKeys.jwks([TestKeys.jwk(rsa: TestKeys.otherRSA, kid: "rsa-2")])
        let keys = Keys(TestKeys.defaultJWKS, rotated)
        let claims = try await verify(await TestKeys.sign(.init(nonce: "n-1"), kid: "rsa-2", rsaKey: TestKeys.otherRSA), keys: keys)
        XCTAssertEqual(claims.subject, "alice")
        XCTAssertEqual(keys.requests, [false, true])
    }

    func testAlgNoneIsRejectedBeforeAnyKeyLookup() async {
        let keys = Keys(TestKeys.defaultJWKS)
        for token in TestKeys.unsigned(.init(nonce: "n-1")) {
            await assertRejected(token, keys: keys, "unsigned")
        }
        XCTAssertEqual(keys.requests, [], "no key is fetched for an unsigned token")
    }

    func testHMACSignedWithThePublicKeyIsRejected() async throws {
        let keys = Keys(TestKeys.defaultJWKS)
        await assertRejected(await TestKeys.hmacWithPublicKey(.init(nonce: "n-1")), keys: keys, "algorithm the agent does not accept")
        XCTAssertEqual(keys.requests, [])
        // Even a header alg the verifier allows cannot pick a key of another type or another declared alg.
        let ecUnderRSAKid = await TestKeys.sign(.init(nonce: "n-1"), kid: "rsa-1", with: .es256)
        await assertRejected(ecUnderRSAKid, "does not list")
        let psUnderRS256Key = await TestKeys.sign(.init(nonce: "n-1"), with: .ps256)
        await assertRejected(psUnderRS256Key, "does not list")
        // A JWKS entry for a symmetric key is never used.
        let set = try JSONWebKeySet.parse(TestKeys.jwks([["kty": "oct", "kid": "rsa-1", "k": "c2VjcmV0"], ["kty": "RSA", "use": "enc", "kid": "x", "n": "AQAB", "e": "AQAB"]]))
        XCTAssertEqual(set.count, 0)
    }

    func testClaimsAreCheckedAfterTheSignature() async {
        await assertRejected(await TestKeys.sign(.init(aud: ["someone-else"], nonce: "n-1")), "aud")
        await assertRejected(await TestKeys.sign(.init(aud: ["client-1", "other"], nonce: "n-1")), "azp")
        await assertRejected(await TestKeys.sign(.init(nonce: "replayed")), "nonce")
        await assertRejected(await TestKeys.sign(.init(nonce: nil)), "nonce")
        await assertRejected(await TestKeys.sign(.init(exp: 1_799_999_000, nonce: "n-1")), "expired")
        await assertRejected(await TestKeys.sign(.init(iss: "https://evil.example", nonce: "n-1")), "issuer")
        await assertRejected(await TestKeys.sign(.init(iat: 1_800_001_000, nonce: "n-1")), "future")
    }

    func testLeewayIsBounded() async throws {
        // Within the leeway (300 s) an expired token still passes; beyond it, not.
        _ = try await verify(await TestKeys.sign(.init(exp: 1_800_000_100 - 299, nonce: "n-1")))
        await assertRejected(await TestKeys.sign(.init(exp: 1_800_000_100 - 301, nonce: "n-1")), "expired")
    }

    func testRefreshedTokenMustNameTheSameUser() async throws {
        let original = try await verify(await TestKeys.sign(.init(nonce: "n-1")))
        let refreshed = try await verify(await TestKeys.sign(.init(iat: 1_800_000_050)), nonce: nil, original: original)
        XCTAssertEqual(refreshed.subject, "alice", "no nonce is needed on refresh")
        _ = try await verify(await TestKeys.sign(.init(nonce: "n-1")), nonce: nil, original: original)
        await assertRejected(await TestKeys.sign(.init(sub: "mallory")), nonce: nil, original: original, "subject")
        await assertRejected(await TestKeys.sign(.init(nonce: "other")), nonce: nil, original: original, "nonce")
        await assertRejected(await TestKeys.sign(.init(), rsaKey: TestKeys.otherRSA), nonce: nil, original: original, "signature")
    }

    /// OIDC Core §2: `iat` is required. RFC 7519 §4.1.5: a token is not accepted before its `nbf`, with the leeway of
    /// `exp` and `iat`. A date of another type is refused, never read as absent.
    func testIssueTimeIsRequiredAndNotBeforeIsChecked() async throws {
        let header = #"{"alg":"RS256","kid":"rsa-1","typ":"JWT"}"#
        let claims = #""iss":"https://issuer.example","sub":"alice","aud":"client-1","exp":1800003600,"nonce":"n-1""#
        func token(_ dates: String) -> String { TestKeys.signRaw(header: header, payload: "{" + claims + dates + "}") }
        _ = try await verify(token(#","iat":1800000000"#))
        await assertRejected(token(""), "no issue time (iat)")
        await assertRejected(token(#","iat":"1800000000""#), "iat is not a number")
        await assertRejected(token(#","iat":null"#), "iat is not a number")
        // now is 1_800_000_100: an nbf up to now + 300 s passes; one beyond, or of another type, does not.
        _ = try await verify(token(#","iat":1800000000,"nbf":1800000000"#))
        _ = try await verify(token(#","iat":1800000000,"nbf":1800000399"#))
        await assertRejected(token(#","iat":1800000000,"nbf":1800000401"#), "not valid yet (nbf)")
        await assertRejected(token(#","iat":1800000000,"nbf":"1800000000""#), "nbf is not a number")
        await assertRejected(token(#","iat":1800000000,"nbf":true"#), "nbf is not a number")
    }

    /// OIDC Core §12.2: a refreshed token's `auth_time`, when it has one, is the sign-in's, or a later one (the person
    /// authenticated again at the provider since); never an earlier one.
    func testRefreshedTokenNeverNamesAnEarlierAuthTimeThanTheSignIns() async throws {
        let original = try await verify(await TestKeys.sign(.init(nonce: "n-1", auth_time: 1_799_999_000)))
        XCTAssertEqual(original.authTime, 1_799_999_000)
        _ = try await verify(await TestKeys.sign(.init(auth_time: 1_799_999_000)), nonce: nil, original: original)
        _ = try await verify(await TestKeys.sign(.init()), nonce: nil, original: original)
        _ = try await verify(await TestKeys.sign(.init(auth_time: 1_800_000_050)), nonce: nil, original: original)
        await assertRejected(await TestKeys.sign(.init(auth_time: 1_799_998_999)), nonce: nil, original: original,
                             "auth_time is earlier")
        let header = #"{"alg":"RS256","kid":"rsa-1","typ":"JWT"}"#
        let payload = #"{"iss":"https://issuer.example","sub":"alice","aud":"client-1","exp":1800003600,"iat":1800000000,"auth_time":"1799999000"}"#
        await assertRejected(TestKeys.signRaw(header: header, payload: payload), nonce: nil, original: original,
                             "auth_time is not a number")
    }

    /// RFC 7519 §4: a claim set (or header) naming a member twice is refused, even properly signed: which value counts
    /// differs between parsers. The message names the member, never a value.
    func testRepeatedMembersAreRejected() async throws {
        let header = #"{"alg":"RS256","kid":"rsa-1","typ":"JWT"}"#
        let claims = #""iss":"https://issuer.example","aud":"client-1","exp":1800003600,"iat":1800000000,"nonce":"n-1""#
        // The raw signer is sound: the same claims without a repeat verify.
        let plain = try await verify(TestKeys.signRaw(header: header, payload: #"{"sub":"alice","#+claims+"}"))
        XCTAssertEqual(plain.subject, "alice")
        await assertRejected(TestKeys.signRaw(header: header, payload: #"{"sub":"alice","sub":"mallory","#+claims+"}"),
                             "claims names the member 'sub' more than once")
        await assertRejected(TestKeys.signRaw(header: header, payload: #"{"sub":"alice","aud":"someone-else","#+claims+"}"),
                             "member 'aud'")
        // An escaped spelling is the same name to JSONDecoder.
        await assertRejected(TestKeys.signRaw(header: header, payload: #"{"sub":"alice","s\u0075b":"mallory","#+claims+"}"),
                             "member 'sub'")
        await assertRejected(TestKeys.signRaw(header: #"{"alg":"RS256","kid":"rsa-1","kid":"ec-1"}"#, payload: #"{"sub":"alice","#+claims+"}"),
                             "header names the member 'kid'")
        do {
            _ = try await verify(TestKeys.signRaw(header: header, payload: #"{"sub":"alice","sub":"mallory","#+claims+"}"))
        } catch {
            XCTAssertFalse("\(error)".contains("mallory"), "\(error)")
        }
    }
}
