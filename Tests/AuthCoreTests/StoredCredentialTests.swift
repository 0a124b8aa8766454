@testable import AuthCore
import Foundation
import XCTest

/// The keyring item's secret (``StoredCredential``) with the sign-in's ID token claims (OIDC Core §12.2's reference
/// for a refreshed ID token): their round trip, beside a DPoP key or not, and items written before they were kept.
final class StoredCredentialTests: XCTestCase {
    let claims = IDTokenClaims(issuer: "https://issuer.example", subject: "alice", audiences: ["client-1", "other"],
                               authorizedParty: "client-1", nonce: "n-1", authTime: 1_799_999_000.5,
                               email: "alice@example.test", name: "Alice")
    /// What is kept of `claims`: what the comparison needs, not the profile.
    var kept: IDTokenClaims {
        var kept = claims
        (kept.email, kept.name) = (nil, nil)
        return kept
    }

    func testClaimsRoundTripWithTheRefreshTokenAndWithTheKey() throws {
        let plain = StoredCredential.refreshToken(Secret("rt-1"), signInClaims: claims)
        XCTAssertEqual(plain.signInClaims, kept, "the profile claims (email, name) are never stored")
        XCTAssertEqual(try StoredCredential(stored: plain.stored), plain)
        XCTAssertFalse(plain.stored.reveal().contains("alice"), "the claims are encoded, not spelled out")
        XCTAssertTrue(plain.stored.reveal().hasSuffix("\u{1}rt-1"), "the token comes last, as it always has")

        let proofKey = DPoPKey()
        let bound = StoredCredential.refreshToken(Secret("rt-2"), proofKey: proofKey, signInClaims: claims)
        XCTAssertTrue(bound.stored.reveal().hasPrefix("\u{1}dpop_es256\u{1}"), "the key comes first, as it always has")
        let read = try StoredCredential(stored: bound.stored)
        XCTAssertEqual(read, bound)
        XCTAssertEqual(read.proofKey?.thumbprint, proofKey.thumbprint)

        let bare = IDTokenClaims(issuer: "https://issuer.example", subject: "bob", audiences: ["client-1"])
        let minimal = StoredCredential.refreshToken(Secret("rt-3"), signInClaims: bare)
        XCTAssertEqual(try StoredCredential(stored: minimal.stored).signInClaims, bare, "no azp, auth_time or nonce: none read back")
        XCTAssertEqual(minimal.stored, StoredCredential.refreshToken(Secret("rt-3"), signInClaims: bare).stored,
                       "the same claims are always the same text")
    }

    func testItemsWrittenBeforeTheClaimsWereKeptReadWithout() throws {
        XCTAssertEqual(try StoredCredential(stored: Secret("rt-old")), .refreshToken(Secret("rt-old")))
        let proofKey = DPoPKey()
        let keyOnly = StoredCredential.refreshToken(Secret("rt-old"), proofKey: proofKey).stored
        let read = try StoredCredential(stored: keyOnly)
        XCTAssertNil(read.signInClaims)
        XCTAssertEqual(read.proofKey, proofKey)
        XCTAssertEqual(read.refreshToken?.reveal(), "rt-old")
        XCTAssertEqual(StoredCredential.refreshToken(Secret("rt-old")).stored.reveal(), "rt-old",
                       "a sign-in without an ID token is stored as it always was")
    }

    /// A claims section that does not read (someone else's edit) is an error, as an unreadable key is: where the token
    /// starts is no longer known for sure.
    func testAnUnreadableClaimsSectionNeedsANewSignIn() {
        let json = Base64URL.encode(Array(#"{"iss":"https://issuer.example","sub":"alice"}"#.utf8))
        for broken in ["\u{1}id_claims\u{1}not base64!\u{1}rt-1", "\u{1}id_claims\u{1}rt-1",
                       "\u{1}id_claims\u{1}\(json)\u{1}rt-1"] {
            XCTAssertThrowsError(try StoredCredential(stored: Secret(broken))) { error in
                XCTAssertEqual((error as? AuthError)?.code, .loginRequired)
                XCTAssertTrue("\(error)".contains("ID token claims cannot be read"), "\(error)")
            }
        }
    }
}
