import AuthTestSupport
@testable import AuthCore
import Foundation
import Logging
import Synchronization
import XCTest

/// Scripted token/discovery endpoint that records every request.
final class FakeHTTP: HTTPTransport, @unchecked Sendable {
    private let lock = NSLock()
    var discovery: [String: HTTPReply] = [:]
    var tokenReplies: [HTTPReply] = []
    var revocationStatus = 200
    /// Answers of the pushed authorization request endpoint (`/par`), in order.
    var parReplies: [HTTPReply] = []
    private(set) var posts: [(url: URL, fields: [String: String], basic: Bool, headers: [String: String])] = []
    /// Delay before the token endpoint answers (to let concurrent callers pile up).
    var tokenDelay: Duration = .zero
    /// Holds token requests until the test opens it (no sleeping).
    var tokenGate: TokenGate?
    /// With a value, ``tokenGate`` holds only the token requests of that `grant_type` (e.g. `refresh_token`).
    var tokenGateGrant: String?
    /// Thrown by the next token requests, in order, before any scripted reply (e.g. `server_unreachable`).
    var tokenFailures: [AuthError] = []

    private(set) var gets: [URL] = []
    /// Holds GET requests (discovery, JWKS) until the test opens it.
    var getGate: TokenGate?

    func get(_ url: URL) async throws(AuthError) -> HTTPReply {
        if let gate = lock.withLock({ getGate }) { await gate.pass() }
        // As the real client reports a fetch its task's cancellation cut short.
        if Task.isCancelled { throw AuthError(.serverUnreachable, "cannot reach \(url): CancellationError()") }
        return lock.withLock {
            gets.append(url)
            return discovery[url.absoluteString]
        } ?? HTTPReply(status: 404, body: [])
    }

    /// How often the provider's JWKS was fetched.
    var jwksFetches: Int { lock.withLock { gets.filter { $0.path == "/jwks" }.count } }

    func postForm(_ url: URL, fields: [(String, String)], basicAuth: (user: String, password: Secret)?,
                  headers: [(String, String)]) async throws(AuthError) -> HTTPReply {
        let delay = lock.withLock { () -> Duration in
            posts.append((url, Dictionary(fields, uniquingKeysWith: { a, _ in a }), basicAuth != nil,
                          Dictionary(headers, uniquingKeysWith: { a, _ in a })))
            return tokenDelay
        }
        if delay > .zero { try? await Task.sleep(for: delay) }
        if url.path.hasSuffix("revoke") { return HTTPReply(status: revocationStatus, body: []) }
        if url.path.hasSuffix("par") {
            return lock.withLock { parReplies.isEmpty ? HTTPReply(status: 404, body: []) : parReplies.removeFirst() }
        }
        let grant = fields.first { $0.0 == "grant_type" }?.1
        if let gate = lock.withLock({ tokenGateGrant.map { $0 == grant } ?? true ? tokenGate : nil }) { await gate.pass() }
        if let failure = lock.withLock({ tokenFailures.isEmpty ? nil : tokenFailures.removeFirst() }) { throw failure }
        return lock.withLock {
            guard !tokenReplies.isEmpty else { return HTTPReply(status: 500, body: Array("no scripted reply".utf8)) }
            return tokenReplies.removeFirst()
        }
    }

    var tokenPosts: [[String: String]] { lock.withLock { posts.filter { $0.url.path.hasSuffix("token") }.map(\.fields) } }
    var parPosts: [(fields: [String: String], basic: Bool)] {
        lock.withLock { posts.filter { $0.url.path.hasSuffix("par") }.map { ($0.fields, $0.basic) } }
    }
    /// The headers of each token request (a DPoP proof).
    var tokenHeaders: [[String: String]] { lock.withLock { posts.filter { $0.url.path.hasSuffix("token") }.map(\.headers) } }
    var revokePosts: [[String: String]] { lock.withLock { posts.filter { $0.url.path.hasSuffix("revoke") }.map(\.fields) } }

    static func tokenReply(access: String, refresh: String? = nil, expiresIn: Int = 3600, idToken: String? = nil) -> HTTPReply {
        var object: [String: Any] = ["access_token": access, "token_type": "Bearer", "expires_in": expiresIn]
        if let refresh { object["refresh_token"] = refresh }
        if let idToken { object["id_token"] = idToken }
        return HTTPReply(status: 200, body: Array(try! JSONSerialization.data(withJSONObject: object)))
    }

    static func errorReply(_ status: Int, _ error: String) -> HTTPReply {
        HTTPReply(status: status, body: Array(#"{"error":"\#(error)"}"#.utf8))
    }
}

/// A redirect listener whose "browser" is the test: `deliver(query:)` calls the judge as a request would.
final class FakeRedirects: RedirectListenerFactory, @unchecked Sendable {
    private let lock = NSLock()
    private var judge: (@Sendable (String?) -> RedirectPage)?
    private(set) var closed = 0
    private(set) var opened = 0

    func listen(host: LoopbackHost, port: UInt16, path: String, judge: @escaping @Sendable (String?) -> RedirectPage) async throws(AuthError) -> any RedirectListener {
        lock.withLock {
            self.judge = judge
            opened += 1
        }
        return Listener(uri: "http://127.0.0.1:50000\(path)") { [weak self] in self?.lock.withLock { self?.closed += 1 } }
    }

    func deliver(_ query: String?) -> RedirectPage? {
        let judge = lock.withLock { self.judge }
        return judge?(query)
    }

    struct Listener: RedirectListener {
        let uri: String
        let onClose: @Sendable () -> Void
        var redirectURI: String { uri }
        func close() async { onClose() }
    }
}

final class FakeBrowser: BrowserLauncher, @unchecked Sendable {
    private let lock = NSLock()
    private(set) var opened: [URL] = []
    var fails = false
    func open(_ url: URL) throws(AuthError) {
        if fails { throw AuthError(.loginFailed, "no browser") }
        lock.withLock { opened.append(url) }
    }
    var lastQuery: [String: [String]] {
        lock.withLock { LoginSession.parseQuery(URLComponents(url: opened.last!, resolvingAgainstBaseURL: false)!.percentEncodedQuery ?? "") }
    }
}

enum Fixtures {
    static let issuer = URL(string: "https://issuer.example")!
    static func account(_ name: String = "work", scopes: [String] = ["openid", "email"], secret: String? = nil) -> AccountConfig {
        AccountConfig(name: name, issuer: issuer, clientID: "client-1", clientSecret: secret.map(Secret.init), scopes: scopes,
                      loginTimeout: .seconds(5))
    }
    static let discoveryBody = Array("""
    {"issuer":"https://issuer.example","authorization_endpoint":"https://issuer.example/authorize",
     "token_endpoint":"https://issuer.example/token","revocation_endpoint":"https://issuer.example/revoke",
     "jwks_uri":"https://issuer.example/jwks","code_challenge_methods_supported":["S256"]}
    """.utf8)

    static let jwksURI = "https://issuer.example/jwks"

    /// A properly signed ID token for the default account (RS256, kid "rsa-1").
    static func signedIDToken(nonce: String?, sub: String = "alice") async -> String {
        await TestKeys.sign(TestKeys.Claims(sub: sub, nonce: nonce))
    }

    /// An ID token with the given claims and a junk signature: for claim checks only.
    static func idToken(nonce: String?, aud: Any = "client-1", iss: String = "https://issuer.example", exp: Double = 1_800_003_600,
                        alg: String = "RS256", signature: String = "c2ln") -> String {
        var claims: [String: Any] = ["iss": iss, "aud": aud, "sub": "alice", "email": "alice@example.test", "exp": exp, "iat": 1_800_000_000]
        if let nonce { claims["nonce"] = nonce }
        let header = Base64URL.encode(try! JSONSerialization.data(withJSONObject: ["alg": alg, "typ": "JWT"]))
        let payload = Base64URL.encode(try! JSONSerialization.data(withJSONObject: claims))
        return "\(header).\(payload).\(signature)"
    }

    static func broker(accounts: [AccountConfig] = [account()], store: MemorySecretStore = MemorySecretStore(),
                       http: FakeHTTP = FakeHTTP(), redirects: FakeRedirects = FakeRedirects(),
                       browser: FakeBrowser = FakeBrowser(), clock: ManualClock = ManualClock()) -> TokenBroker {
        http.discovery["https://issuer.example/.well-known/openid-configuration"] = HTTPReply(status: 200, body: discoveryBody)
        if http.discovery[jwksURI] == nil { http.discovery[jwksURI] = HTTPReply(status: 200, body: TestKeys.defaultJWKS) }
        return TokenBroker(accounts: accounts, store: store, http: http, redirects: redirects, browser: browser, time: clock,
                           logger: Logger(label: "test"))
    }
}

extension XCTestCase {
    /// Fails unless `body` throws an ``AuthError`` with `code`.
    func assertThrows(_ code: AuthError.Code, file: StaticString = #filePath, line: UInt = #line,
                      _ body: () async throws -> Void) async {
        do {
            try await body()
            XCTFail("expected \(code.rawValue)", file: file, line: line)
        } catch {
            XCTAssertEqual((error as? AuthError)?.code, code, "\(error)", file: file, line: line)
        }
    }
}

/// A gate for token requests: each waits in ``pass()`` until ``open()``; ``arrived(_:)`` returns once that many have
/// reached it, so a test knows a refresh is in flight without sleeping.
final class TokenGate: @unchecked Sendable {
    private let lock = NSLock()
    private var isOpen = false
    private var held: [CheckedContinuation<Void, Never>] = []
    private var arrivals = 0
    private var watchers: [(count: Int, continuation: CheckedContinuation<Void, Never>)] = []

    func pass() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let (resumeNow, ready) = lock.withLock { () -> (Bool, [CheckedContinuation<Void, Never>]) in
                arrivals += 1
                let ready = watchers.filter { $0.count <= arrivals }.map(\.continuation)
                watchers.removeAll { $0.count <= arrivals }
                if !isOpen { held.append(continuation) }
                return (isOpen, ready)
            }
            ready.forEach { $0.resume() }
            if resumeNow { continuation.resume() }
        }
    }

    func arrived(_ count: Int = 1) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let now = lock.withLock { () -> Bool in
                if arrivals >= count { return true }
                watchers.append((count, continuation))
                return false
            }
            if now { continuation.resume() }
        }
    }

    func open() {
        let released = lock.withLock { () -> [CheckedContinuation<Void, Never>] in
            isOpen = true
            defer { held.removeAll() }
            return held
        }
        released.forEach { $0.resume() }
    }
}
