@testable import AgentService
import AuthTestSupport
@testable import AgentIPC
@testable import AgentServer
@testable import AgentAccess
@testable import AuthCore
import Foundation
import Logging
import XCTest

/// A token the server gave no expiry (a GitHub OAuth app's, kept in the keyring as ``StoredCredential``): the reply
/// says `does_not_expire` and carries no expiry, and any `min_valid` is satisfied, also long after the token was
/// loaded. No network is reachable (``NoHTTP``): there is nothing to redeem.
final class NonExpiringTokenReplyTests: XCTestCase {
    let clock = ManualClock(wallOrigin: Date(timeIntervalSince1970: 1_800_000_000.25))
    let caller = Caller(pid: 4242, uid: 1000, via: "socket", exe: "/usr/bin/git")
    let account = AccountConfig(name: "gh", issuer: URL(string: "https://github.com")!, clientID: "client", scopes: ["repo"])

    func makeDispatcher(account: AccountConfig? = nil) -> RequestDispatcher {
        let account = account ?? self.account
        let store = MemorySecretStore(items: [SecretKey(account): StoredCredential.longLivedAccessToken(Secret("gho_x")).stored])
        let broker = TokenBroker(accounts: [account], store: store, http: NoHTTP(), redirects: NoRedirects(),
                                 browser: NoBrowser(), time: clock, random: { 0 }, logger: Logger(label: "test"))
        return RequestDispatcher(operations: AgentOperations(broker: broker, info: AgentInfo(version: "9.9.9", pid: 1, startedAt: .now, socketPath: "/x"),
                                 logger: Logger(label: "test")))
    }

    func reply(_ line: String, _ dispatcher: RequestDispatcher) async throws -> [UInt8] {
        guard case .request(let request) = WireRequest.decode(line: Array(line.utf8)) else { throw XCTSkip("not a request") }
        return await dispatcher.execute(request, caller: caller) { _ in } + [0x0A]
    }

    func assertNoExpiry(_ line: [UInt8], file: StaticString = #filePath, line number: UInt = #line) throws {
        let text = String(decoding: line, as: UTF8.self)
        XCTAssertTrue(text.contains(#""does_not_expire":true"#), text, file: file, line: number)
        XCTAssertFalse(text.contains("expires_in"), text, file: file, line: number)
        XCTAssertFalse(text.contains("expires_at"), text, file: file, line: number)
        let decoded = try JSONDecoder().decode(WireResponse<TokenResult>.self, from: Data(line.dropLast()))
        XCTAssertEqual(decoded.result?.expiry, .never, text, file: file, line: number)
        XCTAssertEqual(decoded.result?.accessToken, "gho_x", file: file, line: number)
    }

    func testTheReplySaysTheTokenDoesNotExpireWithAndWithoutAnID() async throws {
        let dispatcher = makeDispatcher()
        try assertNoExpiry(try await reply(#"{"v":1,"id":7,"op":"token","account":"gh"}"#, dispatcher))
        clock.advance(.milliseconds(1337))
        let again = try await reply(#"{"v":1,"id":-3,"op":"token","account":"gh"}"#, dispatcher)
        try assertNoExpiry(again)
        XCTAssertTrue(String(decoding: again, as: UTF8.self).contains(#""id":-3"#))
        let withoutID = try await reply(#"{"v":1,"op":"token","account":"gh"}"#, dispatcher)
        try assertNoExpiry(withoutID)
        XCTAssertFalse(String(decoding: withoutID, as: UTF8.self).contains(#""id""#))
    }

    func testAnyMinValidIsSatisfiedAlsoLongAfterTheTokenWasLoaded() async throws {
        let dispatcher = makeDispatcher()
        let most = WireProtocol.minValidRange.upperBound
        let line = #"{"v":1,"id":1,"op":"token","account":"gh","min_valid":\#(most)}"#
        try assertNoExpiry(try await reply(line, dispatcher))
        for _ in 0..<4 {
            clock.advance(.seconds(100 * 24 * 3600))
            try assertNoExpiry(try await reply(line, dispatcher))
        }
    }

    func testStatusSaysTheAccessTokenDoesNotExpire() async throws {
        let dispatcher = makeDispatcher()
        _ = try await reply(#"{"v":1,"id":1,"op":"token","account":"gh"}"#, dispatcher)
        let status = await dispatcher.operations.status(caller: Caller(pid: 1, uid: 1000, via: "socket"))
        let account = try XCTUnwrap(status.accounts.first)
        XCTAssertEqual(account.accessTokenDoesNotExpire, true)
        XCTAssertNil(account.accessTokenExpiresAt)
        XCTAssertNil(account.accessTokenExpiresIn)
    }

    func testAScopedTokenOfTheLongLivedCredentialDoesNotExpireEither() async throws {
        var scoped = AccountConfig(name: "gh", issuer: URL(string: "https://github.com")!, clientID: "client",
                                   scopes: ["repo", "gist"])
        scoped.scopedTokens = true
        let dispatcher = makeDispatcher(account: scoped)
        try assertNoExpiry(try await reply(#"{"v":1,"id":4,"op":"token","account":"gh","scopes":["repo"]}"#, dispatcher))
        let status = await dispatcher.operations.status(caller: Caller(pid: 1, uid: 1000, via: "socket"))
        let entry = try XCTUnwrap(status.accounts.first?.scopedTokens?.first)
        XCTAssertEqual(entry.doesNotExpire, true)
        XCTAssertNil(entry.expiresAt)
        XCTAssertNil(entry.expiresIn)
    }
}
