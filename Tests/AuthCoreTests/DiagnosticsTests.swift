import AuthTestSupport
@testable import AuthCore
import Foundation
import XCTest

final class DiagnosticsTests: XCTestCase {
    let discoveryURL = "https://issuer.example/.well-known/openid-configuration"

    func testHTTPDateParsesIMFFixdateAndRefusesOtherForms() {
        XCTAssertEqual(HTTPDate.parse("Sun, 06 Nov 1994 08:49:37 GMT")?.timeIntervalSince1970, 784_111_777)
        XCTAssertEqual(HTTPDate.parse("Fri, 15 Jan 2027 08:00:00 GMT")?.timeIntervalSince1970, 1_800_000_000)
        XCTAssertEqual(HTTPDate.parse("Tue, 29 Feb 2000 00:00:00 GMT")?.timeIntervalSince1970, 951_782_400)
        XCTAssertNil(HTTPDate.parse("Sunday, 06-Nov-94 08:49:37 GMT"), "RFC 850 form")
        XCTAssertNil(HTTPDate.parse("Sun Nov  6 08:49:37 1994"), "asctime form")
        XCTAssertNil(HTTPDate.parse("Sun, 06 Nov 1994 08:49:37 CET"))
        XCTAssertNil(HTTPDate.parse("Sun, 06 Foo 1994 08:49:37 GMT"))
        XCTAssertNil(HTTPDate.parse("Sun, 06 Nov 1994 25:49:37 GMT"))
        XCTAssertNil(HTTPDate.parse(""))
    }

    func testValidDiscoveryWithKeysAndTheServersClock() async throws {
        let http = FakeHTTP()
        let clock = ManualClock()  // wall clock 1_800_000_000
        let broker = Fixtures.broker(http: http, clock: clock)
        http.discovery[discoveryURL] = HTTPReply(status: 200, body: Fixtures.discoveryBody, date: "Fri, 15 Jan 2027 07:59:30 GMT")
        let diagnosis = try await broker.diagnose()
        XCTAssertEqual(diagnosis.keyring, .available)
        let account = try XCTUnwrap(diagnosis.accounts.first)
        XCTAssertEqual(account.name, "work")
        XCTAssertNil(account.error)
        XCTAssertEqual(account.metadata?.tokenEndpoint.absoluteString, "https://issuer.example/token")
        XCTAssertEqual(account.signingKeys, 2)
        XCTAssertEqual(account.serverDate?.timeIntervalSince1970, 1_799_999_970)
        XCTAssertEqual(account.receivedAt?.timeIntervalSince1970, 1_800_000_000, "our clock is 30 s ahead")
        XCTAssertEqual(http.gets.filter { $0.absoluteString == discoveryURL }.count, 1)
    }

    func testChecksAfreshEvenWithMetadataCachedAndReportsAnIssuerMismatch() async throws {
        let http = FakeHTTP()
        let broker = Fixtures.broker(http: http)
        _ = try await broker.diagnose()
        http.discovery[discoveryURL] = HTTPReply(status: 200, body: Array(
            String(decoding: Fixtures.discoveryBody, as: UTF8.self).replacingOccurrences(of: "\"issuer\":\"https://issuer.example\"",
                                                                                         with: "\"issuer\":\"https://evil.example\"").utf8))
        let again = try await broker.diagnose(account: "work")
        let account = try XCTUnwrap(again.accounts.first)
        XCTAssertEqual(account.error?.code, .issuerMismatch)
        XCTAssertTrue(account.error?.message.contains("https://evil.example") ?? false, account.error?.message ?? "")
        XCTAssertNil(account.metadata)
        XCTAssertEqual(http.gets.filter { $0.absoluteString == discoveryURL }.count, 2, "no cache between two checks")
    }

    func testUnreachableServerIsReportedPerAccount() async throws {
        let http = UnreachableHTTP()
        let broker = TokenBroker(accounts: [Fixtures.account()], store: MemorySecretStore(), http: http, redirects: FakeRedirects(),
                                 browser: FakeBrowser(), time: ManualClock(), logger: .init(label: "test"))
        let diagnosis = try await broker.diagnose()
        let account = try XCTUnwrap(diagnosis.accounts.first)
        XCTAssertEqual(account.error?.code, .serverUnreachable)
        XCTAssertNil(account.serverDate)
    }

    func testExplicitEndpointsNeedNoDiscoveryButTheIssuerGivesTheTime() async throws {
        let http = FakeHTTP()
        var config = Fixtures.account(scopes: ["repo"])
        config.authorizationEndpoint = URL(string: "https://issuer.example/login/authorize")
        config.tokenEndpoint = URL(string: "https://issuer.example/login/token")
        config.revocationEndpoint = URL(string: "https://issuer.example/login/revoke")
        let broker = Fixtures.broker(accounts: [config], http: http)
        http.discovery["https://issuer.example"] = HTTPReply(status: 200, body: [], date: "Fri, 15 Jan 2027 08:00:00 GMT")
        let diagnosis = try await broker.diagnose()
        let account = try XCTUnwrap(diagnosis.accounts.first)
        XCTAssertNil(account.error)
        XCTAssertTrue(account.endpointsConfigured)
        XCTAssertNil(account.signingKeys, "no openid, no keys to check")
        XCTAssertEqual(http.gets.map(\.absoluteString), ["https://issuer.example"])
        XCTAssertEqual(account.serverDate?.timeIntervalSince1970, 1_800_000_000)
    }

    func testUnknownAccountIsAnError() async {
        let broker = Fixtures.broker()
        do {
            _ = try await broker.diagnose(account: "nope")
            XCTFail("expected unknown_account")
        } catch let error as AuthError {
            XCTAssertEqual(error.code, .unknownAccount)
        } catch {
            XCTFail("\(error)")
        }
    }
}

private struct UnreachableHTTP: HTTPTransport {
    func get(_ url: URL) async throws(AuthError) -> HTTPReply { throw AuthError(.serverUnreachable, "cannot reach \(url.host ?? "")") }
    func postForm(_ url: URL, fields: [(String, String)], basicAuth: (user: String, password: Secret)?,
                  headers: [(String, String)]) async throws(AuthError) -> HTTPReply {
        throw AuthError(.serverUnreachable, "no")
    }
}
