import AuthTestSupport
@testable import AuthCore
import Foundation
import XCTest

/// A token endpoint that refuses a refresh with a 4xx and no OAuth error body (an empty 400, a 401, an HTML page):
/// the sign-in is dead, reported once as `login_required` with the server's status, and not retried; an outage
/// (5xx, 408, 429, network) never costs the refresh token.
final class RefusedRefreshTests: XCTestCase {
    let key = SecretKey(Fixtures.account())

    func testBodylessClientErrorsMeanSignInRequiredWithTheStatus() {
        let cases: [HTTPReply] = [
            HTTPReply(status: 400, body: []),
            HTTPReply(status: 401, body: []),
            HTTPReply(status: 403, body: Array("<html><body>Forbidden</body></html>".utf8)),
            HTTPReply(status: 404, body: Array("not found".utf8)),
        ]
        for reply in cases {
            let error = TokenResponseParser.error(from: reply)
            XCTAssertEqual(error.code, .loginRequired, "HTTP \(reply.status)")
            XCTAssertTrue(error.message.contains("HTTP \(reply.status)"), error.message)
        }
        for status in [408, 429, 500, 502, 503] {
            XCTAssertEqual(TokenResponseParser.error(from: HTTPReply(status: status, body: [])).code, .serverError, "HTTP \(status)")
        }
    }

    func testBodylessRefusalDeletesTheSentTokenSignalsOnceAndIsNotRetried() async throws {
        let store = MemorySecretStore(items: [key: Secret("rt-1")])
        let http = FakeHTTP()
        http.tokenReplies = [HTTPReply(status: 401, body: Array("<html>Unauthorized</html>".utf8))]
        let broker = Fixtures.broker(store: store, http: http)
        let events = broker.events()
        do {
            _ = try await broker.accessToken(account: "work")
            XCTFail("expected login_required")
        } catch {
            XCTAssertEqual(error.code, .loginRequired)
            XCTAssertTrue(error.message.contains("HTTP 401"), error.message)
            XCTAssertTrue(error.message.contains("authctl login work"), error.message)
        }
        let stored = await store.items[key]
        XCTAssertNil(stored, "the refused refresh token is dropped, as for invalid_grant")
        // Later callers learn it from the keyring, not from the server: no retry storm.
        for _ in 0..<5 { await assertThrows(.loginRequired) { _ = try await broker.accessToken(account: "work") } }
        XCTAssertEqual(http.tokenPosts.count, 1)
        let due = await broker.entriesDueForRefresh()
        XCTAssertTrue(due.isEmpty)
        let status = await broker.status()
        XCTAssertEqual(status.accounts.first?.hasRefreshToken, false)
        XCTAssertEqual(status.accounts.first?.lastError?.code, .loginRequired)
        // The event the desktop notification follows (shown once per account by SignInNotifications).
        let signalled = await SystemTimeSource().within(.seconds(5), fallback: false) {
            for await event in events where event == .signInRequired("work") { return true }
            return false
        }
        XCTAssertTrue(signalled)
    }

    func testOutagesNeverCostTheRefreshToken() async throws {
        let outages: [(HTTPReply?, AuthError?)] = [
            (HTTPReply(status: 408, body: []), nil),
            (HTTPReply(status: 502, body: Array("<html>Bad gateway</html>".utf8)), nil),
            (nil, AuthError(.serverUnreachable, "cannot reach the server: the server did not answer in time")),
            (nil, AuthError(.serverUnreachable, "cannot reach the server: connection refused")),
        ]
        for (reply, failure) in outages {
            let store = MemorySecretStore(items: [key: Secret("rt-1")])
            let http = FakeHTTP()
            if let reply { http.tokenReplies = [reply] }
            if let failure { http.tokenFailures = [failure] }
            let broker = Fixtures.broker(store: store, http: http)
            do {
                _ = try await broker.accessToken(account: "work")
                XCTFail("expected a failure")
            } catch {
                XCTAssertTrue(RefreshPolicy.isTransient(error.code), "\(error)")
            }
            let kept = await store.items[key]
            XCTAssertEqual(kept?.reveal(), "rt-1", "\(reply.map { "HTTP \($0.status)" } ?? "\(failure!)") lost the refresh token")
        }
    }
}
