import AgentService
import AuthTestSupport
@testable import AgentDBus
import AgentIPC
import AgentAccess
import AuthCore
import Foundation
import Logging
import XCTest

/// The D-Bus interface's semantics without a bus: method → shared operation, result → D-Bus values, error →
/// named error. The broker runs on in-memory adapters; nothing here talks to a network.
final class AgentBusAPITests: XCTestCase {

    let caller = Caller(pid: 1, uid: 1000, via: "dbus")

    func operations() -> AgentOperations {
        let account = AccountConfig(name: "work", issuer: URL(string: "https://login.example.com")!, clientID: "client",
                                    scopes: ["openid", "email"])
        let broker = TokenBroker(accounts: [account], store: MemorySecretStore(), http: NoHTTP(), redirects: NoRedirects(),
                                 browser: NoBrowser(), logger: Logger(label: "test"))
        return AgentOperations(broker: broker, info: AgentInfo(version: "9.9.9", pid: 42, startedAt: .now, socketPath: "/run/x.sock"),
                               logger: Logger(label: "test"))
    }

    func testAnUnknownAccountIsItsNamedError() async {
        let reply = await AgentBusAPI.perform(.getAccessToken(account: "nope", minValid: 0), on: operations(), caller: caller)
        guard case .error(let name, let message) = reply else { return XCTFail("expected an error, got \(reply)") }
        XCTAssertEqual(name, "dev.authagent.Error.UnknownAccount")
        XCTAssertTrue(message.contains("nope"), message)
    }

    func testNoStoredSignInIsLoginRequired() async {
        let reply = await AgentBusAPI.perform(.getAccessToken(account: "work", minValid: 60), on: operations(), caller: caller)
        guard case .error(let name, _) = reply else { return XCTFail("expected an error, got \(reply)") }
        XCTAssertEqual(name, "dev.authagent.Error.LoginRequired")
    }

    func testARequestForAProofIsCheckedBeforeAnythingElse() async {
        let reply = await AgentBusAPI.perform(.getAccessTokenForRequest(account: "work", minValid: 0, method: "GET",
                                                                        url: "ftp://x.example/", nonce: nil),
                                              on: operations(), caller: caller)
        XCTAssertEqual(reply, .error(name: "dev.authagent.Error.InvalidTarget",
                                     message: "the DPoP URL must be an absolute http or https URL"))
        let signedOut = await AgentBusAPI.perform(.getAccessTokenForRequest(account: "work", minValid: 0, method: "GET",
                                                                            url: "https://x.example/", nonce: "n"),
                                                  on: operations(), caller: caller)
        guard case .error(let name, _) = signedOut else { return XCTFail("expected an error, got \(signedOut)") }
        XCTAssertEqual(name, "dev.authagent.Error.LoginRequired")
    }

    func testMinValidOutOfRangeIsABadRequest() async {
        let reply = await AgentBusAPI.perform(.getAccessToken(account: "work", minValid: UInt32.max), on: operations(), caller: caller)
        XCTAssertEqual(reply, .error(name: "dev.authagent.Error.BadRequest", message: "min_valid must be between 0 and 31622400 seconds"))
    }

    func testListAccountsCarriesTheSocketsFields() async {
        let reply = await AgentBusAPI.perform(.listAccounts, on: operations(), caller: caller)
        guard case .values(let values) = reply, values.count == 1, case .dictArray(let accounts) = values[0] else {
            return XCTFail("expected one aa{sv}, got \(reply)")
        }
        XCTAssertEqual(accounts.count, 1)
        XCTAssertEqual(accounts[0]["name"], .string("work"))
        XCTAssertEqual(accounts[0]["client_id"], .string("client"))
        XCTAssertEqual(accounts[0]["scopes"], .stringArray(["openid", "email"]))
        XCTAssertEqual(accounts[0]["redirect_uri"], .string("http://127.0.0.1/oauth2/callback/work"))
    }

    func testStatusIsAgentThenAccounts() async {
        let reply = await AgentBusAPI.perform(.getStatus, on: operations(), caller: caller)
        guard case .values(let values) = reply else { return XCTFail("\(reply)") }
        XCTAssertEqual(values.map(\.signature), ["a{sv}", "aa{sv}"])
        guard case .dict(let agent) = values[0], case .dictArray(let accounts) = values[1] else { return XCTFail("\(values)") }
        XCTAssertEqual(agent["version"], .string("9.9.9"))
        XCTAssertEqual(agent["pid"], .int64(42))
        XCTAssertEqual(agent["keyring"], .string("available"))
        XCTAssertEqual(accounts.first?["signed_in"], .bool(false))
        XCTAssertEqual(accounts.first?["login_pending"], .bool(false))
        XCTAssertNil(accounts.first?["last_refresh"], "unknown optional fields are left out, as on the socket")
    }

    func testLogoutOfASignedOutAccountReportsNothingRevoked() async {
        let reply = await AgentBusAPI.perform(.logout(account: "work"), on: operations(), caller: caller)
        guard case .values(let values) = reply, case .dict(let result) = values.first else { return XCTFail("\(reply)") }
        XCTAssertEqual(result["account"], .string("work"))
        XCTAssertEqual(result["had_refresh_token"], .bool(false))
    }
}
