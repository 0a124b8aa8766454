import AgentService
import AuthTestSupport
@testable import AgentDBus
import AgentIPC
import AgentAccess
import AuthCore
import Foundation
import Logging
import XCTest

/// `GetAccessToken`'s `x expires_at` cannot be absent: for a token that does not expire (a GitHub OAuth app's, kept
/// in the keyring) it is 0, never a date the agent made up; `GetStatus` says so by name.
final class NonExpiringBusTokenTests: XCTestCase {
    let caller = Caller(pid: 1, uid: 1000, via: "dbus")

    func operations() -> AgentOperations {
        let account = AccountConfig(name: "gh", issuer: URL(string: "https://github.com")!, clientID: "client", scopes: ["repo"])
        let store = MemorySecretStore(items: [SecretKey(account): StoredCredential.longLivedAccessToken(Secret("gho_x")).stored])
        let broker = TokenBroker(accounts: [account], store: store, http: NoHTTP(), redirects: NoRedirects(),
                                 browser: NoBrowser(), logger: Logger(label: "test"))
        return AgentOperations(broker: broker, info: AgentInfo(version: "9.9.9", pid: 42, startedAt: .now, socketPath: "/run/x.sock"),
                               logger: Logger(label: "test"))
    }

    func testATokenThatDoesNotExpireHasExpiresAtZero() async {
        let ops = operations()
        let reply = await AgentBusAPI.perform(.getAccessToken(account: "gh", minValid: 31_622_400), on: ops, caller: caller)
        XCTAssertEqual(reply, .values([.string("gho_x"), .int64(0)]))
        let status = await AgentBusAPI.perform(.getStatus, on: ops, caller: caller)
        guard case .values(let values) = status, case .dictArray(let accounts) = values[1] else { return XCTFail("\(status)") }
        XCTAssertEqual(accounts.first?["access_token_does_not_expire"], .bool(true))
        XCTAssertNil(accounts.first?["access_token_expires_at"])
    }
}
