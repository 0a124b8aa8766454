@testable import AgentDBus
import AgentIPC
import Foundation
import XCTest

/// True if `name` is a syntactically valid D-Bus error name (the D-Bus specification's rules for an interface name).
func isValidErrorName(_ name: String) -> Bool {
    let elements = name.split(separator: ".", omittingEmptySubsequences: false)
    guard name.utf8.count <= 255, elements.count >= 2 else { return false }
    return elements.allSatisfy { element in
        guard let first = element.first, !first.isNumber else { return false }
        return element.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "_") }
    }
}

final class BusValueTests: XCTestCase {
    func testEveryErrorCodeHasAValidDistinctName() {
        let names = ErrorCode.allCases.map { DBusErrorName.forCode($0.rawValue) }
        XCTAssertEqual(Set(names).count, names.count)
        for name in names { XCTAssertTrue(isValidErrorName(name), name) }
        XCTAssertEqual(DBusErrorName.forCode("login_required"), "dev.authagent.Error.LoginRequired")
        XCTAssertEqual(DBusErrorName.forCode("invalid_id_token"), "dev.authagent.Error.InvalidIdToken")
        XCTAssertTrue(isValidErrorName(DBusErrorName.accessDenied))
    }

    func testErrorNameValidation() {
        XCTAssertFalse(isValidErrorName("NoDots"))
        XCTAssertFalse(isValidErrorName("dev.auth-agent.Error"))
        XCTAssertFalse(isValidErrorName("dev.9lives.Error"))
        XCTAssertFalse(isValidErrorName("dev..Error"))
    }

    func testResultsBecomeVariantMapsWithTheWireNames() {
        let account = StatusResult.Account(
            name: "work", issuer: "https://i", clientID: "c", redirectURI: "http://127.0.0.1/cb", scopes: [],
            signedIn: nil, accessTokenExpiresAt: 1_800_000_000, accessTokenExpiresIn: nil, lastRefresh: nil,
            lastError: .init(code: "server_error", message: "boom", at: 5), loginPending: true)
        let dict = BusValue.dictionary(encoding: account)
        XCTAssertEqual(dict["name"], .string("work"))
        XCTAssertEqual(dict["scopes"], .stringArray([]), "an empty list is still a list of strings")
        XCTAssertNil(dict["signed_in"], "null (unknown) is left out")
        XCTAssertEqual(dict["access_token_expires_at"], .int64(1_800_000_000))
        XCTAssertEqual(dict["login_pending"], .bool(true))
        XCTAssertEqual(dict["last_error"], .dict(["code": .string("server_error"), "message": .string("boom"), "at": .int64(5)]))
        XCTAssertEqual(BusValue.dict(dict).signature, "a{sv}")
    }

    /// Every field the socket's JSON carries is on the bus under the same name, nested structures and lists of them
    /// included: the bus map read back as JSON equals the socket's JSON, null fields left out.
    func testTheBusMapCarriesWhatTheSocketsJSONCarries() throws {
        let account = StatusResult.Account(
            name: "work", issuer: "https://i", clientID: "c", redirectURI: "http://127.0.0.1/cb", scopes: ["a", "b"],
            signedIn: true, accessTokenExpiresAt: 1_800_000_000, accessTokenExpiresIn: 60, lastRefresh: 7,
            lastError: nil, loginPending: false,
            scopedTokens: [.init(scopes: ["a"], resource: "https://r", expiresAt: 9, expiresIn: 3),
                           .init(scopes: nil, resource: nil, expiresAt: nil, expiresIn: nil, doesNotExpire: true)],
            access: AccountAccess(open: false, allowedClients: ["/usr/bin/git"], confirm: "never", summary: "only git"))
        let json = try JSONSerialization.jsonObject(with: JSONEncoder().encode(account)) as? NSDictionary
        XCTAssertEqual(Self.json(.dict(BusValue.dictionary(encoding: account))) as? NSDictionary, json)
        let scoped = BusValue.dictionary(encoding: account)["scoped_tokens"]
        XCTAssertEqual(scoped?.signature, "aa{sv}")
    }

    /// A bus value as the JSON object it stands for (integers as numbers, maps as objects).
    static func json(_ value: BusValue) -> Any {
        switch value {
        case .string(let s): return s
        case .bool(let b): return b
        case .int64(let i): return i
        case .double(let d): return d
        case .stringArray(let a): return a
        case .dict(let d): return d.mapValues(json) as NSDictionary
        case .dictArray(let a): return a.map { $0.mapValues(json) as NSDictionary }
        }
    }

    func testPollTimeoutFollowsSdBusDeadline() {
        XCTAssertEqual(BusLoop.pollTimeout(deadline: .max, now: 5), -1)
        XCTAssertEqual(BusLoop.pollTimeout(deadline: 100, now: 200), 0)
        XCTAssertEqual(BusLoop.pollTimeout(deadline: 2_500, now: 1_000), 2, "rounded up: never wake before the deadline")
        XCTAssertEqual(BusLoop.pollTimeout(deadline: 2_000, now: 1_000), 1)
    }

    /// An agent whose bus is gone, or never came (no session bus: an SSH login), keeps no job for a loop that will
    /// not run: every broker event submits one, for as long as the agent runs.
    func testALoopThatEndedKeepsNoJobs() {
        let loop = BusLoop()
        loop.submit { _ in }
        XCTAssertEqual(loop.queued, 1, "kept while a loop may still run it")
        loop.end()
        XCTAssertEqual(loop.queued, 0)
        for _ in 0..<100 { loop.submit { _ in } }
        XCTAssertEqual(loop.queued, 0)
    }
}

