import AuthTestSupport
@testable import AuthCore
import Foundation
import XCTest

/// ``TokenBroker/reconfigure(_:)``: what a configuration reload keeps and what it drops.
final class ReconfigureTests: XCTestCase {
    func signedIn(_ accounts: [AccountConfig] = [Fixtures.account()]) async throws -> (TokenBroker, FakeHTTP) {
        var items: [SecretKey: Secret] = [:]
        for account in accounts { items[SecretKey(account)] = Secret("rt-\(account.name)") }
        let http = FakeHTTP()
        http.tokenReplies = (1...6).map { FakeHTTP.tokenReply(access: "at-\($0)", refresh: nil, expiresIn: 3600) }
        let broker = Fixtures.broker(accounts: accounts, store: MemorySecretStore(items: items), http: http)
        for account in accounts { _ = try await broker.accessToken(account: account.name) }
        return (broker, http)
    }

    func testUnchangedAccountsKeepTheirTokensAndNewOnesAppear() async throws {
        let (broker, http) = try await signedIn()
        let outcome = await broker.reconfigure([Fixtures.account(), Fixtures.account("home")])
        XCTAssertEqual(outcome, .init(added: ["home"]))
        let names = await broker.accountNames
        XCTAssertEqual(names, ["work", "home"])
        let token = try await broker.accessToken(account: "work")
        XCTAssertEqual(token.accessToken.reveal(), "at-1")
        XCTAssertEqual(http.tokenPosts.count, 1, "nothing asked of the server")
    }

    func testAccessPolicyChangeKeepsTokensButTokenSettingsChangeDropsThem() async throws {
        let (broker, http) = try await signedIn()
        var policy = Fixtures.account()
        policy.access = AccessPolicy(allowedClients: [.path("/usr/bin/git")], confirm: .never)
        var outcome = await broker.reconfigure([policy])
        XCTAssertEqual(outcome, .init(changed: ["work"]))
        var token = try await broker.accessToken(account: "work")
        XCTAssertEqual(token.accessToken.reveal(), "at-1")

        let scopes = Fixtures.account(scopes: ["openid"])
        outcome = await broker.reconfigure([scopes])
        XCTAssertEqual(outcome, .init(changed: ["work"], reset: ["work"]))
        token = try await broker.accessToken(account: "work")
        XCTAssertEqual(token.accessToken.reveal(), "at-2", "a new token from the refresh token in the keyring")
        XCTAssertEqual(http.tokenPosts.last?["scope"] ?? "openid", "openid")
    }

    func testRemovedAccountIsForgottenInMemoryButItsKeyringEntryStays() async throws {
        let home = Fixtures.account("home")
        let (broker, _) = try await signedIn([Fixtures.account(), home])
        let outcome = await broker.reconfigure([Fixtures.account()])
        XCTAssertEqual(outcome, .init(removed: ["home"]))
        do {
            _ = try await broker.accessToken(account: "home")
            XCTFail("a removed account is unknown")
        } catch {
            XCTAssertEqual(error.code, .unknownAccount)
        }
        let stored = try await broker.loadRefreshToken(SecretKey(home))
        XCTAssertEqual(stored?.reveal(), "rt-home", "adding the account back restores its sign-in")
    }

    func testEventsTellSubscribersWhatChanged() async throws {
        let (broker, _) = try await signedIn()
        let events = broker.events()
        await broker.reconfigure([Fixtures.account("home")])
        var seen: [BrokerEvent] = []
        for await event in events {
            seen.append(event)
            if event == .configurationChanged { break }
        }
        let expected: [BrokerEvent] = [.accountChanged("home"), .accountChanged("work"), .configurationChanged]
        XCTAssertEqual(seen.count, expected.count)
        XCTAssertTrue(expected.allSatisfy(seen.contains), "\(seen)")
    }
}
