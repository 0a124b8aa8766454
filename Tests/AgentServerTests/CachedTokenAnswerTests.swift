import AuthTestSupport
@testable import AgentIPC
@testable import AgentServer
@testable import AgentService
@testable import AuthCore
import Foundation
import Logging
import NIOCore
import Synchronization
import XCTest

/// The socket's synchronous fast path (``CachedTokenAnswer``), against a real ``TokenBroker`` (in-memory ports, a
/// clock the test moves): what it serves, what it leaves to the broker, and that its pre-encoded replies are byte
/// for byte what the slow path's `JSONEncoder` writes.
final class CachedTokenAnswerTests: XCTestCase {
    /// Both paths read the same instants, so their `expires_in`/`expires_at` agree exactly; the wall clock starts a
    /// quarter second past a whole second, so a rounding difference between the two paths would show.
    let clock = ManualClock(wallOrigin: Date(timeIntervalSince1970: 1_800_000_000.25))
    let caller = Caller(pid: 4242, uid: 1000, via: "socket", exe: "/usr/bin/git")

    func makeDispatcher(accounts: [AccountConfig] = [CachedTokenAnswerTests.account()]) -> RequestDispatcher {
        let broker = TokenBroker(accounts: accounts, store: MemorySecretStore(), http: NoHTTP(), redirects: NoRedirects(),
                                 browser: NoBrowser(), time: clock, random: { 0 }, logger: Logger(label: "test"))
        return RequestDispatcher(broker: broker, info: AgentInfo(version: "9.9.9", pid: 1, startedAt: .now, socketPath: "/x"),
                                 logger: Logger(label: "test"))
    }

    static func account(_ name: String = "work", scopes: [String] = ["openid", "email"]) -> AccountConfig {
        AccountConfig(name: name, issuer: URL(string: "https://login.example.com")!, clientID: "client", scopes: scopes)
    }

    /// Answers one line as the accept loop does: the fast path's reply line, or nil when the broker must answer.
    func send(_ line: String, to dispatcher: RequestDispatcher) -> [UInt8]? {
        guard case .request(let request) = RequestDispatcher.decode(Array(line.utf8)) else { return nil }
        var buffer = ByteBufferAllocator().buffer(capacity: 256)
        guard CachedTokenAnswer.answer(request, caller: caller, operations: dispatcher.operations,
                                       snapshot: dispatcher.operations.broker.snapshot, into: &buffer) else {
            XCTAssertEqual(buffer.readableBytes, 0, "nothing written when not answered")
            return nil
        }
        return Array(buffer: buffer)
    }

    /// What the slow path answers for `line` at the same instant (the reference the fast path must match).
    func slowReply(_ line: String, _ dispatcher: RequestDispatcher) async throws -> [UInt8] {
        guard case .request(let request) = RequestDispatcher.decode(Array(line.utf8)) else { throw XCTSkip("not a request") }
        return await dispatcher.execute(request, caller: caller) { _ in } + [0x0A]
    }

    func testAFreshCachedTokenIsServedByteForByteAsTheSlowPathWould() async throws {
        let dispatcher = makeDispatcher()
        await dispatcher.operations.broker.install("work", access: "at-1", lifetime: .seconds(3600))
        let line = #"{"v":1,"id":7,"op":"token","account":"work"}"#
        let reply = try XCTUnwrap(send(line, to: dispatcher), "served by the fast path")
        let slow = try await slowReply(line, dispatcher)
        XCTAssertEqual(String(decoding: reply, as: UTF8.self), String(decoding: slow, as: UTF8.self))
        let decoded = try JSONDecoder().decode(WireResponse<TokenResult>.self, from: Data(reply.dropLast()))
        XCTAssertEqual(decoded.id, 7)
        XCTAssertEqual(decoded.result?.accessToken, "at-1")
        XCTAssertEqual(decoded.result?.expiresIn, 3600)
        XCTAssertEqual(decoded.result?.scopes, ["openid", "email"], "the account's scopes when the server named none")
    }

    /// Key order, escaping (quotes, backslashes, slashes, control characters, non-ASCII), absent and extreme ids,
    /// server-given scopes: the template is the encoder's own output with holes, and stays identical.
    func testPreEncodedRepliesMatchTheEncoderForAwkwardTokensAndIDs() async throws {
        let tokens = ["plain.jwt.value", #"q"u\o/te</script>"#, "tab\tnl\u{01}\u{7f}", "ünïcødé-✓-𝄞", "a+b/c=="]
        let ids = ["", #""id":0,"#, #""id":-1,"#, #""id":9223372036854775807,"#, #""id":-9223372036854775808,"#]
        for (index, token) in tokens.enumerated() {
            let dispatcher = makeDispatcher(accounts: [CachedTokenAnswerTests.account("acc-\(index)/é\"x", scopes: ["a", "b/c"])])
            let scopes: [String]? = index % 2 == 0 ? nil : ["b/c", "ü\"s"]
            await dispatcher.operations.broker.install("acc-\(index)/é\"x", access: token, lifetime: .seconds(3599 + index),
                                                        scopes: scopes, tokenType: index == 3 ? "DPoP" : "Bearer")
            clock.advance(.milliseconds(1337))
                for id in ids {
                let line = #"{"v":1,\#(id)"op":"token","account":"acc-\#(index)/\u00e9\"x","min_valid":30}"#
                let fast = try XCTUnwrap(send(line, to: dispatcher), line)
                let slow = try await slowReply(line, dispatcher)
                XCTAssertEqual(fast, slow, "\(line):\n\(String(decoding: fast, as: UTF8.self))\n\(String(decoding: slow, as: UTF8.self))")
            }
        }
    }

    func testRequestsTheBrokerMustAnswerAreLeftToIt() async throws {
        let dispatcher = makeDispatcher()
        await dispatcher.operations.broker.install("work", access: "at-1", lifetime: .seconds(3600))
        let passedOn = [
            #"{"v":1,"id":1,"op":"token","account":"work","force_refresh":true}"#,
            #"{"v":1,"id":2,"op":"token","account":"work","interactive":true}"#,
            #"{"v":1,"id":3,"op":"token","account":"work","id_token":true}"#,
            #"{"v":1,"id":4,"op":"token","account":"work","scopes":["openid"]}"#,
            #"{"v":1,"id":5,"op":"token","account":"work","resource":"https://api.example.com"}"#,
            #"{"v":1,"id":6,"op":"token","account":"work","method":"device"}"#,
            #"{"v":1,"id":7,"op":"token","account":"work","min_valid":-1}"#,
            #"{"v":1,"id":9,"op":"token","account":"work","min_valid":99999999999}"#,
            #"{"v":1,"id":10,"op":"token","account":"other"}"#,
            #"{"v":1,"id":11,"op":"token"}"#,
            #"{"v":1,"id":12,"op":"token","account":""}"#,
            #"{"v":1,"id":13,"op":"status"}"#,
            #"{"v":1,"id":14,"op":"logout","account":"work"}"#,
            #"{"v":2,"id":15,"op":"token","account":"work"}"#,
            #"{"v":1,"id":16,"op":"token","account":"work","min_valid":"10"}"#,
            #"not json"#,
        ]
        for line in passedOn {
            XCTAssertNil(send(line, to: dispatcher), line)
        }
        // A min_valid beyond the server's token lifetime is served from the cache too: a refresh would only bring
        // another token of the same lifetime (RefreshPolicy.isFresh, "the freshest the server will give").
        XCTAssertNotNil(send(#"{"v":1,"id":8,"op":"token","account":"work","min_valid":3700}"#, to: dispatcher))
        // Explicit defaults are still plain requests.
        XCTAssertNotNil(send(#"{"v":1,"id":20,"op":"token","account":"work","force_refresh":false,"interactive":false,"id_token":false,"min_valid":3590}"#, to: dispatcher))
    }

    func testAnExpiredTokenAndOneInsideTheEarlyRefreshMarginGoToTheBroker() async throws {
        let dispatcher = makeDispatcher()
        await dispatcher.operations.broker.install("work", access: "at-1", lifetime: .seconds(3600))
        let line = #"{"v":1,"id":1,"op":"token","account":"work"}"#
        // The margin for a 3600 s token with jitter 0: max(10 %, 60 s) = 360 s, so the refresh moment is at 3240 s.
        clock.advance(.seconds(3239))
        XCTAssertNotNil(send(line, to: dispatcher), "just before the early-refresh moment")
        clock.advance(.seconds(1))
        XCTAssertNil(send(line, to: dispatcher),
                        "inside the margin the broker serves it and starts a refresh behind the caller")
        clock.advance(.seconds(351))
        XCTAssertNil(send(line, to: dispatcher), "9 s left: under the policy's 10 s minimum")
        clock.advance(.seconds(3600))
        XCTAssertNil(send(line, to: dispatcher), "expired")
    }

    func testLogoutRemovesTheTokenFromTheFastPath() async throws {
        let dispatcher = makeDispatcher()
        let broker = dispatcher.operations.broker
        await broker.install("work", access: "at-1", lifetime: .seconds(3600))
        let line = #"{"v":1,"id":1,"op":"token","account":"work"}"#
        XCTAssertNotNil(send(line, to: dispatcher))
        XCTAssertNotNil(broker.snapshot.entry("work")?.attachment, "the encoded reply is kept with the entry")
        _ = try await broker.logout(account: "work")
        XCTAssertNil(broker.snapshot.entry("work"), "the token and its encoded reply are gone")
        XCTAssertNil(send(line, to: dispatcher))
        // A new token replaces the old one's encoded reply.
        await broker.install("work", access: "at-2", lifetime: .seconds(3600))
        let reply = try XCTUnwrap(send(line, to: dispatcher))
        XCTAssertTrue(String(decoding: reply, as: UTF8.self).contains(#""access_token":"at-2""#))
    }

    func testDecimalsAreWrittenLikeStringInit() {
        for value in [0, 1, -1, 9, 10, -10, 1_800_003_600, Int.max, Int.min, Int.min + 1] {
            var buffer = ByteBuffer()
            TokenReplyTemplate.writeDecimal(value, into: &buffer)
            XCTAssertEqual(String(buffer: buffer), String(value))
        }
    }

    func testATemplateWithAMissingOrRepeatedHoleIsRefused() {
        XCTAssertNil(TokenReplyTemplate(encoded: Array(#"{"a":1}"#.utf8), holes: ["id"]))
        let twice = Array(#"{"id":-9223372036854775808,"x":{"id":-9223372036854775808}}"#.utf8)
        XCTAssertNil(TokenReplyTemplate(encoded: twice, holes: ["id"]))
    }
}

extension TokenBroker {
    /// Caches a token the way a sign-in or refresh does (through the one publish point), without the network.
    func install(_ name: String, access: String, lifetime: Duration, scopes: [String]? = nil, tokenType: String = "Bearer") {
        accounts[name]?.cache = CachedToken(tokens: TokenSet(accessToken: Secret(access), tokenType: tokenType, scopes: scopes,
                                                             lifetime: lifetime, receivedAt: time.now()))
    }
}
