@testable import AuthCore
import Foundation
import XCTest

/// A provider document naming a member twice is ambiguous (parsers differ on which value counts), so the agent
/// refuses it (SECURITY.md 4, 12, 16). ID tokens: IDTokenVerifierTests.testRepeatedMembersAreRejected.
final class DuplicateMemberTests: XCTestCase {
    func duplicate(_ json: String) -> String? {
        JSONDuplicateScan.firstDuplicate(in: Array(json.utf8))?.name
    }

    func testTheScanFindsRepeatsAtAnyDepthAndNothingElse() {
        XCTAssertEqual(duplicate(#"{"a":1,"b":2,"a":3}"#), "a")
        XCTAssertEqual(duplicate(#"{"o":{"x":[{"k":1,"k":2}]}}"#), "k")
        XCTAssertEqual(duplicate(#"{"s\u0075b":1, "sub" :2}"#), "sub")
        XCTAssertEqual(duplicate(#"{"\"q":1,"\u0022q":2}"#), "\"q")
        XCTAssertEqual(duplicate(#"{"\ud83d\ude42":1,"🙂":2}"#), "", "non-printable names are shown empty, still refused")
        // Not repeats: the same name in sibling objects, a value equal to a name, brackets and quotes inside strings.
        XCTAssertNil(duplicate(#"{"keys":[{"kid":"a"},{"kid":"b"}],"o":{"keys":1}}"#))
        XCTAssertNil(duplicate(#"{"a":"a","b":["a","b"],"c":"{\"a\":1,\"a\":2}","d":"]}","a2":1}"#))
        XCTAssertNil(duplicate(#"{"a":"x\\","b":"\\\"","c":1}"#))
        // Malformed input stays in bounds (JSONDecoder refuses it afterwards).
        for junk in ["", "{", "}", "\"", "{\"a", "{\"a\\", "{\"\\u12", "]]]{{{", "{\"a\":1}}}},\"a\":2"] {
            _ = duplicate(junk)
        }
    }

    func testATokenReplyWithTwoAccessTokensIsRefused() {
        let body = #"{"access_token":"at-one-secret","token_type":"Bearer","access_token":"at-two-secret","expires_in":60}"#
        XCTAssertThrowsError(try TokenResponseParser.parse(HTTPReply(status: 200, body: Array(body.utf8)), receivedAt: .now)) { error in
            let error = error as? AuthError
            XCTAssertEqual(error?.code, .invalidTokenResponse)
            XCTAssertTrue(error?.message.contains("'access_token' more than once") == true, "\(String(describing: error))")
            XCTAssertFalse(error?.message.contains("secret") == true, "no token value in the message")
        }
        // The same in a form-encoded reply (GitHub's answer when it was not asked for JSON).
        let form = "access_token=at-one-secret&token_type=bearer&access_token=at-two-secret"
        XCTAssertThrowsError(try TokenResponseParser.parse(HTTPReply(status: 200, body: Array(form.utf8)), receivedAt: .now)) { error in
            let error = error as? AuthError
            XCTAssertEqual(error?.code, .invalidTokenResponse)
            XCTAssertTrue(error?.message.contains("'access_token' more than once") == true, "\(String(describing: error))")
            XCTAssertFalse(error?.message.contains("secret") == true, "no token value in the message")
        }
        // An error reply repeating `error` is ambiguous too: neither code is believed.
        let errorBody = #"{"error":"invalid_grant","error":"slow_down"}"#
        XCTAssertEqual(TokenResponseParser.error(from: HTTPReply(status: 400, body: Array(errorBody.utf8))).code, .invalidTokenResponse)
    }

    func testADiscoveryDocumentWithTwoIssuersIsRefused() throws {
        let good = String(decoding: Fixtures.discoveryBody, as: UTF8.self)
        _ = try ProviderMetadata.parse(Fixtures.discoveryBody, expectedIssuer: Fixtures.issuer)
        let twoIssuers = good.replacingOccurrences(of: #"{"issuer":"https://issuer.example","#,
                                                   with: #"{"issuer":"https://issuer.example","issuer":"https://evil.example","#)
        XCTAssertNotEqual(twoIssuers, good)
        XCTAssertThrowsError(try ProviderMetadata.parse(Array(twoIssuers.utf8), expectedIssuer: Fixtures.issuer)) { error in
            XCTAssertEqual((error as? AuthError)?.code, .invalidMetadata)
            XCTAssertTrue("\(error)".contains("the member 'issuer' more than once"), "\(error)")
        }
    }

    func testAJWKSWithARepeatedMemberIsRefused() throws {
        XCTAssertEqual(try JSONWebKeySet.parse(TestKeys.defaultJWKS).count, 2)
        let body = String(decoding: TestKeys.defaultJWKS, as: UTF8.self)
        let repeated = body.replacingOccurrences(of: #""kid":"rsa-1""#, with: #""kid":"rsa-1","kid":"ec-1""#)
        XCTAssertNotEqual(repeated, body)
        XCTAssertThrowsError(try JSONWebKeySet.parse(Array(repeated.utf8))) { error in
            XCTAssertEqual((error as? AuthError)?.code, .invalidMetadata)
            XCTAssertTrue("\(error)".contains("'kid'"), "\(error)")
        }
    }
}
