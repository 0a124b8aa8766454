@testable import AgentService
import AgentIPC
@testable import AgentAccess
import AuthCore
import AuthTestSupport
import Foundation
import Glibc
import Logging
import Synchronization
import XCTest

/// Issue 53: an app that may use an account sent 100 `token` requests with `force_refresh` and caused 100 token-endpoint
/// calls (100 rotations of the refresh token). A confined caller's forced refreshes are bounded
/// (``TokenEndpointLimit``); beyond the bound it gets the cached token, without an error. Programs of the desktop are
/// not bounded.
final class ConfinedForcedRefreshTests: XCTestCase {
    static let app = "org.example.App"

    /// This test process as the socket identifies a peer, pinned; with `flatpakApp` it stands for a sandboxed app.
    func me(flatpakApp: String? = nil) -> Caller {
        var caller = Caller.identify(peer: PeerCredentials(pid: getpid(), uid: getuid(), gid: getgid()), via: "socket")
        if let flatpakApp { caller.identity.kind = .flatpak(.init(id: flatpakApp)) }
        return caller
    }

    /// Account `work` (signed in, on a rotating token endpoint and a manual clock) serving the app and `exe`.
    func agent(serving exe: String, scopedTokens: Bool = false)
        -> (AgentOperations, TokenBroker, RotatingTokenEndpoint, ManualClock) {
        var account = AccountConfig(name: "work", issuer: URL(string: "https://issuer.example")!, clientID: "client-1",
                                    scopes: ["read"])
        account.scopedTokens = scopedTokens
        let http = RotatingTokenEndpoint()
        let clock = ManualClock()
        let broker = TokenBroker(accounts: [account], store: MemorySecretStore(items: [SecretKey(account): Secret("rt-0")]),
                                 http: http, redirects: NoRedirects(), browser: NoBrowser(), time: clock,
                                 logger: Logger(label: "test"))
        let access = AccessGate(policies: ["work": AccessPolicy(allowedClients: [.flatpak(Self.app), .path(exe)])],
                                logger: Logger(label: "test"))
        let operations = AgentOperations(broker: broker, info: AgentInfo(version: "9.9.9", pid: 42, startedAt: .now,
                                                                         socketPath: "/run/x.sock"),
                                         access: access, logger: Logger(label: "test"))
        return (operations, broker, http, clock)
    }

    func testAConfinedCallersForcedRefreshesAreBoundedAndADesktopProgramsAreNot() async throws {
        let desktop = me(), app = me(flatpakApp: Self.app)
        XCTAssertTrue(app.identity.isConfined, "the premise")
        let exe = try XCTUnwrap(desktop.identity.policyExe, "the premise: the test process is named by its path")
        let (operations, _, http, clock) = agent(serving: exe)
        let forced = WireRequest(op: .token) { $0.forceRefresh = true }

        var tokens: Set<String> = []
        for _ in 0..<10 {
            tokens.insert(try await operations.token(account: "work", forced, caller: app).accessToken)
        }
        XCTAssertEqual(http.refreshes, 1, "one forced refresh honoured, the other nine served from the cache")
        XCTAssertEqual(tokens, ["at-1"])

        clock.advance(TokenEndpointLimit.defaultInterval)
        let again = try await operations.token(account: "work", forced, caller: app).accessToken
        XCTAssertEqual(again, "at-2", "honoured again once the interval has passed")
        let cached = try await operations.token(account: "work", forced, caller: app).accessToken
        XCTAssertEqual(cached, "at-2")

        for n in 3...5 {
            let token = try await operations.token(account: "work", forced, caller: desktop).accessToken
            XCTAssertEqual(token, "at-\(n)", "a program of the desktop: every forced refresh honoured, as before")
        }
        XCTAssertEqual(http.refreshes, 5)
        XCTAssertEqual(operations.access.audit.entries(account: "work").filter { $0.outcome == "granted" }.count, 15,
                       "every request was served")
    }

    /// A host or app allowed an account with `scoped_tokens` asked for a new `resource` per request: each was a refresh
    /// (a token-endpoint call and a rotation), and each a cache entry refreshed ahead of expiry for ever. Confined
    /// callers get four new sets per account a minute (then `agent_busy` with when to ask again); a set already
    /// cached is served without counting; programs of the desktop are not limited; an account keeps at most 32.
    func testAConfinedCallersNewTokenSetsAreBoundedAndTheCacheIsToo() async throws {
        let desktop = me(), app = me(flatpakApp: Self.app)
        let exe = try XCTUnwrap(desktop.identity.policyExe, "the premise: the test process is named by its path")
        let (operations, broker, http, clock) = agent(serving: exe, scopedTokens: true)
        func asking(_ n: Int) -> WireRequest { WireRequest(op: .token) { $0.resource = "https://api.example/\(n)" } }

        for n in 0..<4 { _ = try await operations.token(account: "work", asking(n), caller: app) }
        XCTAssertEqual(http.refreshes, 4)
        do {
            _ = try await operations.token(account: "work", asking(4), caller: app)
            XCTFail("a fifth new set within the minute was served")
        } catch {
            XCTAssertEqual(error.code, ErrorCode.agentBusy.rawValue)
            XCTAssertEqual(error.retryAfter, 60)
        }
        XCTAssertEqual(http.refreshes, 4, "refused before the token endpoint")
        _ = try await operations.token(account: "work", asking(2), caller: app)
        XCTAssertEqual(http.refreshes, 4, "a set already cached is served from the cache, and does not count")
        clock.advance(.seconds(60))
        _ = try await operations.token(account: "work", asking(4), caller: app)
        XCTAssertEqual(http.refreshes, 5, "again once the minute has passed")

        for n in 5..<45 { _ = try await operations.token(account: "work", asking(n), caller: desktop) }
        XCTAssertEqual(http.refreshes, 45, "a program of the desktop: every new set served")
        let kept = await broker.status().accounts.first?.scopedTokens.count ?? 0
        XCTAssertEqual(kept, 32, "the account keeps 32 scoped tokens at most")
    }
}

/// Discovery and a token endpoint that rotates: refresh N answers `at-N` and `rt-N`.
final class RotatingTokenEndpoint: HTTPTransport {
    private let count = Mutex(0)
    var refreshes: Int { count.withLock { $0 } }

    func get(_ url: URL) async throws(AuthError) -> HTTPReply {
        guard url.absoluteString == "https://issuer.example/.well-known/openid-configuration" else {
            return HTTPReply(status: 404, body: [])
        }
        return HTTPReply(status: 200, body: Array(#"""
            {"issuer":"https://issuer.example","authorization_endpoint":"https://issuer.example/authorize",
             "token_endpoint":"https://issuer.example/token","code_challenge_methods_supported":["S256"]}
            """#.utf8))
    }

    func postForm(_ url: URL, fields: [(String, String)], basicAuth: (user: String, password: Secret)?,
                  headers: [(String, String)]) async throws(AuthError) -> HTTPReply {
        let n = count.withLock { $0 += 1; return $0 }
        return HTTPReply(status: 200, body: Array(
            #"{"access_token":"at-\#(n)","token_type":"Bearer","expires_in":3600,"refresh_token":"rt-\#(n)"}"#.utf8))
    }
}
