@testable import AuthCore
@testable import AuthTransport
import Foundation
import NIOCore
import NIOEmbedded
import XCTest

/// The redirect listener's request check under mutation fuzzing: raw bytes into the listener's real pipeline
/// (size limiter, NIO's HTTP/1 decoder, `RedirectRequestHandler`) with a real `LoginSession.judge(query:)`, and
/// pasted URLs into `LoginSession.judge(pastedURL:redirectURI:)`.
///
/// Properties: the sign-in is completed (`.code`) only by a GET on the exact path, with `Host: 127.0.0.1:PORT`,
/// carrying the genuine state exactly once and a code; an `error=` is acted on only with the genuine state; the
/// reply, when there is one, is HTTP/1.1 with one of the static pages and `no-store`, and never echoes the input.
final class RedirectRequestFuzzTests: XCTestCase {
    static let state = "S7aTe-0123456789abcdefghijklmnopqrstuvwxyzAB"
    static let port = 43127
    static let path = "/oauth2/callback/work"
    static let canary = "ECHOCANARY"

    static let session: LoginSession = {
        let issuer = URL(string: "https://issuer.example")!
        let metadata = ProviderMetadata(issuer: issuer, authorizationEndpoint: URL(string: "https://issuer.example/authorize")!,
                                        tokenEndpoint: URL(string: "https://issuer.example/token")!)
        let account = AccountConfig(name: "work", issuer: issuer, clientID: "client", scopes: ["openid"])
        return LoginSession(account: account, metadata: metadata, state: state, nonce: "nonce")
    }()

    static let pages = [RedirectPages.success, RedirectPages.denied, RedirectPages.invalid, RedirectPages.notFound]

    func testRedirectRequest() {
        let engine = FuzzEngine(target: "redirect_request", dictionary: [
            "GET ", "POST ", "HEAD ", " HTTP/1.1\r\n", "\r\n\r\n", "Host: 127.0.0.1:\(Self.port)\r\n", "Host: localhost\r\n",
            "Transfer-Encoding: chunked\r\n", "Content-Length: 5\r\n", Self.path, "?code=abc", "&state=\(Self.state)",
            "state=\(Self.state)", "&error=access_denied", "&iss=https%3A%2F%2Fissuer.example", Self.canary, "%2F", "..",
        ], maxLength: 4096)
        let report = engine.run { RedirectRequestFuzzTests.checkListener($0) }
        XCTAssertEqual(report.failures, 0)
    }

    func testPastedRedirectURL() {
        let engine = FuzzEngine(target: "pasted_url", dictionary: [
            "http://127.0.0.1:\(Self.port)\(Self.path)", "http://[::1]:\(Self.port)", "http://localhost:\(Self.port)",
            "?code=abc", "&state=\(Self.state)", "state=\(Self.state)", "&error=access_denied", "user:pw@", "#frag",
            ":\(Self.port)", ":0\(Self.port)", "%2F", "/../", "HTTP://", "https://",
        ], maxLength: 2048)
        let report = engine.run { input in
            let text = String(decoding: input, as: UTF8.self)
            let verdict = RedirectRequestFuzzTests.session.judge(pastedURL: text, redirectURI: "http://127.0.0.1:\(Self.port)\(Self.path)")
            if case .rejected = verdict { return nil }
            // The scheme is case-insensitive (RFC 3986 §3.1) and a port may carry leading zeros (the same port);
            // everything else must be the redirect URI exactly.
            let trimmed = text.trimmingCharacters(in: .whitespacesAndNewlines)
            let afterHost = trimmed.dropFirst(7).drop(while: { $0 != ":" }).dropFirst().drop(while: { $0 == "0" })
            guard trimmed.prefix(7).lowercased() == "http://", trimmed.dropFirst(7).hasPrefix("127.0.0.1:"),
                  afterHost.hasPrefix("\(Self.port)\(Self.path)?"),
                  RedirectRequestFuzzTests.hasGenuineState(trimmed.split(separator: "?", maxSplits: 1).last.map(String.init) ?? "")
            else { return "accepted a pasted URL that is not the redirect URI with the genuine state: \(verdict)" }
            return nil
        }
        XCTAssertEqual(report.failures, 0)
    }

    static func hasGenuineState(_ query: String) -> Bool {
        LoginSession.parseQuery(query)["state"] == [state]
    }

    static func checkListener(_ input: [UInt8]) -> String? {
        let verdicts = VerdictLog()
        let channel = EmbeddedChannel()
        defer { _ = try? channel.finish(acceptAlreadyClosed: true) }
        do {
            try LoopbackRedirectListenerFactory.configure(
                channel, literal: "127.0.0.1", path: path, limits: .init(maxRequestBytes: 2048),
                judge: { query in
                    let verdict = RedirectRequestFuzzTests.session.judge(query: query)
                    verdicts.append(verdict, query: query)
                    switch verdict {
                    case .code: return .success
                    case .denied: return .denied
                    case .rejected: return .invalid
                    }
                })
            channel.localAddress = try SocketAddress(ipAddress: "127.0.0.1", port: port)
            try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 50000)).wait()
        } catch {
            return "cannot configure the pipeline: \(error)"
        }
        var rest = input[...]
        while !rest.isEmpty, channel.isActive {
            let n = min(rest.count, 1 + (rest.count * 7919) % 113)
            _ = try? channel.writeInbound(ByteBuffer(bytes: rest.prefix(n)))
            rest = rest.dropFirst(n)
        }
        var output: [UInt8] = []
        while let part = try? channel.readOutbound(as: ByteBuffer.self) { output += Array(buffer: part) }

        let text = String(decoding: input, as: UTF8.self)
        for (verdict, query) in verdicts.all {
            switch verdict {
            case .code, .denied:
                guard hasGenuineState(query ?? "") else { return "a verdict \(verdict) without the genuine state" }
                guard text.contains("\(path)?"), text.lowercased().contains("host:"), text.contains("127.0.0.1:\(port)") else {
                    return "the judge accepted a request without the exact path and Host"
                }
            case .rejected:
                break
            }
            // The HTTP parser skips CR and LF bytes before a request line (RFC 9112 §2.2), so "\rGET ..." is a GET.
            let requestLine = input.drop(while: { $0 == 0x0D || $0 == 0x0A })
            if case .code = verdict, !(requestLine.starts(with: Array("GET ".utf8)) || text.contains("\nGET ") || text.contains("\r\nGET ")) {
                return "a non-GET request completed the sign-in"
            }
        }
        if !output.isEmpty {
            let reply = String(decoding: output, as: UTF8.self)
            guard reply.hasPrefix("HTTP/1.1 ") else { return "the reply is not HTTP/1.1: \(reply.prefix(40).debugDescription)" }
            if reply.contains(canary) { return "the reply echoes the request" }
            // One or more responses (e.g. NIO's 400 for an unparsable request, then the size limiter's 431 for the
            // bytes that were already read); the static pages never contain "HTTP/1.1 ".
            for response in reply.components(separatedBy: "HTTP/1.1 ").dropFirst() {
                let parts = response.components(separatedBy: "\r\n\r\n")
                let body = parts.dropFirst().joined(separator: "\r\n\r\n")
                // (NIO's own 400 for a request it cannot parse has no body and no headers of ours: nothing to cache.)
                guard !body.isEmpty else { continue }
                guard pages.contains(body) else {
                    return "a reply body is not a static page: \(reply.prefix(400).debugDescription)"
                }
                guard parts[0].lowercased().contains("cache-control: no-store") else { return "a page without no-store" }
            }
        }
        return nil
    }
}

/// What the judge saw, from the event loop's callback (EmbeddedChannel runs it on this thread).
final class VerdictLog: @unchecked Sendable {
    private(set) var all: [(LoginSession.Verdict, String?)] = []
    func append(_ verdict: LoginSession.Verdict, query: String?) { all.append((verdict, query)) }
}
