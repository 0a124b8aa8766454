@testable import AgentIPC
import FoundationEssentials
import XCTest

/// A token the server gave no expiry (a GitHub OAuth app's) is said not to expire on the wire: `does_not_expire`,
/// never an `expires_in`/`expires_at` the agent made up; and every other token still carries both.
final class NonExpiringTokenWireTests: XCTestCase {
    private func object(_ value: some Encodable) throws -> [String: Any] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        return try XCTUnwrap(JSONSerialization.jsonObject(with: encoder.encode(value)) as? [String: Any])
    }

    private let never = TokenResult(account: "gh", accessToken: "gho_x", tokenType: "Bearer", expiry: .never,
                                    scopes: ["repo"], idToken: nil)

    func testATokenThatDoesNotExpireSaysSoAndCarriesNoExpiry() throws {
        let json = try object(never)
        XCTAssertEqual(json["does_not_expire"] as? Bool, true)
        XCTAssertNil(json["expires_in"], "no invented expiry")
        XCTAssertNil(json["expires_at"], "no invented expiry")
        XCTAssertNil(never.expiresIn)
        XCTAssertNil(never.expiresAt)
    }

    func testAnExpiringTokenCarriesItsExpiryAndNoFlag() throws {
        let result = TokenResult(account: "w", accessToken: "t", tokenType: "Bearer", expiresIn: 3599,
                                 expiresAt: 1_800_003_599, scopes: nil, idToken: nil)
        let json = try object(result)
        XCTAssertEqual(json["expires_in"] as? Int, 3599)
        XCTAssertEqual(json["expires_at"] as? Int, 1_800_003_599)
        XCTAssertNil(json["does_not_expire"])
    }

    func testBothReadersAgreeOnEveryFormOfTheExpiry() throws {
        let cases: [(String, TokenExpiry)] = [
            (#""does_not_expire":true"#, .never),
            (#""does_not_expire":true,"expires_in":5,"expires_at":6"#, .never),
            (#""does_not_expire":false,"expires_in":5,"expires_at":6"#, .after(seconds: 5, unixTime: 6)),
            (#""does_not_expire":null,"expires_in":5,"expires_at":6"#, .after(seconds: 5, unixTime: 6)),
            (#""expires_in":5,"expires_at":6"#, .after(seconds: 5, unixTime: 6)),
        ]
        for (members, expiry) in cases {
            let line = #"{"v":1,"id":3,"result":{"account":"gh","access_token":"t","token_type":"Bearer","#
                + members + "}}"
            let codable = try JSONDecoder().decode(WireResponse<TokenResult>.self, from: Data(line.utf8)).result
            XCTAssertEqual(codable?.expiry, expiry, line)
            guard case .result(let fast)? = TokenWire.decode(Array(line.utf8), request: 3) else { return XCTFail("fast reader: \(line)") }
            XCTAssertEqual(fast, codable, line)
        }
    }

    func testAReplyThatSaysNothingAboutExpiryIsRefused() {
        for members in [#""does_not_expire":false"#, "", #""expires_in":5"#, #""does_not_expire":"yes","expires_in":5,"expires_at":6"#] {
            let line = #"{"v":1,"id":1,"result":{"account":"gh","access_token":"t","token_type":"Bearer""#
                + (members.isEmpty ? "" : "," + members) + "}}"
            XCTAssertNil(TokenWire.decode(Array(line.utf8), request: 1), line)
            XCTAssertThrowsError(try JSONDecoder().decode(WireResponse<TokenResult>.self, from: Data(line.utf8)), line)
        }
    }

    func testTheEncodedReplyReadsBackAsTheSameToken() throws {
        let data = try JSONEncoder().encode(WireResponse(id: 1, result: never))
        XCTAssertEqual(try JSONDecoder().decode(WireResponse<TokenResult>.self, from: data).result, never)
        guard case .result(let fast)? = TokenWire.decode(Array(data), request: 1) else { return XCTFail("fast reader") }
        XCTAssertEqual(fast, never)
    }

    func testSignInResultSaysTheAccessTokenDoesNotExpire() throws {
        let login = LoginResult(account: "gh", subject: nil, email: nil, name: nil, scopes: ["repo"],
                                hasRefreshToken: true, accessTokenExpiresAt: nil)
        let json = try object(login)
        XCTAssertEqual(json["access_token_does_not_expire"] as? Bool, true)
        XCTAssertNil(json["access_token_expires_at"])
        XCTAssertEqual(try JSONDecoder().decode(LoginResult.self, from: JSONEncoder().encode(login)), login)

        let expiring = LoginResult(account: "w", subject: nil, email: nil, name: nil, scopes: nil, hasRefreshToken: true,
                                   accessTokenExpiresAt: 1_800_003_600)
        let expiringJSON = try object(expiring)
        XCTAssertEqual(expiringJSON["access_token_expires_at"] as? Int, 1_800_003_600)
        XCTAssertNil(expiringJSON["access_token_does_not_expire"])
        XCTAssertEqual(try JSONDecoder().decode(LoginResult.self, from: JSONEncoder().encode(expiring)), expiring)
    }
}
