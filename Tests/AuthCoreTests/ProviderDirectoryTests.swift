@testable import AuthCore
import AuthTestSupport
import Foundation
import Logging
import XCTest

/// ``ProviderDirectory`` on its own: what it fetches, when it fetches again, and whose configuration an entry
/// belongs to. A fake transport counts the requests; a manual clock ages the entries.
final class ProviderDirectoryTests: XCTestCase {
    let discoveryURL = "https://issuer.example/.well-known/openid-configuration"
    let jwks = URL(string: Fixtures.jwksURI)!

    func directory() -> (ProviderDirectory, FakeHTTP, ManualClock) {
        let http = FakeHTTP(), clock = ManualClock()
        http.discovery[discoveryURL] = HTTPReply(status: 200, body: Fixtures.discoveryBody)
        http.discovery[Fixtures.jwksURI] = HTTPReply(status: 200, body: TestKeys.defaultJWKS)
        return (ProviderDirectory(http: http, time: clock, logger: Logger(label: "test")), http, clock)
    }

    func discoveries(_ http: FakeHTTP) -> Int { http.gets.filter { $0.absoluteString == discoveryURL }.count }

    func testMetadataIsKnownForAnHourThenFetchedAgain() async throws {
        let (providers, http, clock) = directory()
        let account = Fixtures.account()
        let first = try await providers.metadata(for: account)
        XCTAssertEqual(first.tokenEndpoint.absoluteString, "https://issuer.example/token")
        clock.advance(ProviderDirectory.metadataMaxAge - .seconds(1))
        _ = try await providers.metadata(for: account)
        XCTAssertEqual(discoveries(http), 1, "fetched again while young")
        clock.advance(.seconds(1))
        _ = try await providers.metadata(for: account)
        XCTAssertEqual(discoveries(http), 2, "not fetched again once an hour old")
    }

    func testAChangedAccountIsFetchedAgainAndResolveNeverCaches() async throws {
        let (providers, http, _) = directory()
        var account = Fixtures.account()
        _ = try await providers.metadata(for: account)
        account.tokenEndpoint = URL(string: "https://issuer.example/other-token")
        let changed = try await providers.metadata(for: account)
        XCTAssertEqual(changed.tokenEndpoint.absoluteString, "https://issuer.example/other-token", "an entry served another configuration")
        XCTAssertEqual(discoveries(http), 2)
        _ = try await providers.resolve(account, using: http)
        _ = try await providers.resolve(account, using: http)
        XCTAssertEqual(discoveries(http), 4, "resolve (doctor) must ask the server every time")
        providers.forget(account.name)
        _ = try await providers.metadata(for: account)
        XCTAssertEqual(discoveries(http), 5, "a forgotten account is fetched again")
    }

    func testAPrefetchIsJoinedAndYoungKeysAreNotFetchedAgain() async throws {
        let (providers, http, clock) = directory()
        let gate = TokenGate()
        http.getGate = gate
        providers.prefetchSigningKeys(account: "work", from: jwks)
        await gate.arrived(1)
        providers.prefetchSigningKeys(account: "work", from: jwks)  // already on its way: no second fetch
        let url = jwks
        let check = Task { [providers] in try await providers.signingKeys(account: "work", from: url, refetch: false) }
        gate.open()
        let keys = try await check.value
        XCTAssertGreaterThan(keys.count, 0)
        XCTAssertEqual(http.jwksFetches, 1, "the check did not join the prefetch")
        _ = try await providers.signingKeys(account: "work", from: jwks, refetch: false)
        XCTAssertEqual(http.jwksFetches, 1, "young keys were fetched again")
        _ = try await providers.signingKeys(account: "work", from: jwks, refetch: true)
        XCTAssertEqual(http.jwksFetches, 2, "an unknown kid must fetch a fresh set")
        clock.advance(ProviderDirectory.signingKeysMaxAge)
        _ = try await providers.signingKeys(account: "work", from: jwks, refetch: false)
        XCTAssertEqual(http.jwksFetches, 3, "keys an hour old were trusted")
    }

    func testAFailedPrefetchIsFetchedAgainByTheCheckWhichReportsItsOwnError() async throws {
        let (providers, http, _) = directory()
        http.discovery[Fixtures.jwksURI] = HTTPReply(status: 503, body: [])
        providers.prefetchSigningKeys(account: "work", from: jwks)
        do {
            _ = try await providers.signingKeys(account: "work", from: jwks, refetch: false)
            XCTFail("keys from a failing server")
        } catch {
            XCTAssertEqual(error.code, .serverError)
            XCTAssertTrue(error.message.contains("HTTP 503"), error.message)
        }
        XCTAssertEqual(http.jwksFetches, 2, "the check must not trust the failed prefetch")
    }
}
