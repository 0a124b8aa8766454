@testable import AuthTransport
import AuthCore
import Foundation
import XCTest
#if canImport(Glibc)
import Glibc
#endif

/// The real NIO listener on loopback, driven with raw HTTP over a TCP socket.
final class LoopbackListenerTests: XCTestCase {
    func request(_ port: Int, _ raw: String) throws -> String {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let rc = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        XCTAssertEqual(rc, 0)
        _ = raw.withCString { send(fd, $0, strlen($0), 0) }
        var response = [UInt8]()
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = recv(fd, &chunk, chunk.count, 0)
            if n <= 0 { break }
            response += chunk[..<n]
        }
        return String(decoding: response, as: UTF8.self)
    }

    func testOnlyExactGETWithMatchingHostReachesTheJudge() async throws {
        let seen = LockedBox<[String?]>([])
        let listener = try await LoopbackRedirectListenerFactory().listen(port: 0, path: "/oauth2/callback/work") { query in
            seen.mutate { $0.append(query) }
            return query == "code=good&state=s" ? .success : .invalid
        }
        defer { Task { await listener.close() } }
        XCTAssertTrue(listener.redirectURI.hasPrefix("http://127.0.0.1:"))
        XCTAssertTrue(listener.redirectURI.hasSuffix("/oauth2/callback/work"))
        let port = Int(listener.redirectURI.split(separator: ":")[2].split(separator: "/")[0])!
        let host = "127.0.0.1:\(port)"

        let wrongHost = try request(port, "GET /oauth2/callback/work?code=good&state=s HTTP/1.1\r\nHost: evil.example:\(port)\r\n\r\n")
        XCTAssertTrue(wrongHost.hasPrefix("HTTP/1.1 400"), wrongHost)
        let wrongPath = try request(port, "GET /favicon.ico HTTP/1.1\r\nHost: \(host)\r\n\r\n")
        XCTAssertTrue(wrongPath.hasPrefix("HTTP/1.1 404"))
        let post = try request(port, "POST /oauth2/callback/work?code=good&state=s HTTP/1.1\r\nHost: \(host)\r\nContent-Length: 0\r\n\r\n")
        XCTAssertTrue(post.hasPrefix("HTTP/1.1 405"))
        XCTAssertEqual(seen.value, [], "none of those reached the judge")

        let bad = try request(port, "GET /oauth2/callback/work?code=x&state=<script> HTTP/1.1\r\nHost: \(host)\r\n\r\n")
        XCTAssertTrue(bad.hasPrefix("HTTP/1.1 400"))
        XCTAssertFalse(bad.contains("<script>"), "nothing from the request is echoed")
        let good = try request(port, "GET /oauth2/callback/work?code=good&state=s HTTP/1.1\r\nHost: \(host)\r\n\r\n")
        XCTAssertTrue(good.hasPrefix("HTTP/1.1 200"))
        XCTAssertTrue(good.contains("Cache-Control: no-store"))
        XCTAssertTrue(good.contains("Referrer-Policy: no-referrer"))
        XCTAssertTrue(good.contains("You can close this tab"))
        XCTAssertEqual(seen.value, ["code=x&state=<script>", "code=good&state=s"])
    }

    func testBrowserLauncherRefusesNonHTTPSAndUsesNoShell() throws {
        let launcher = ExecBrowserLauncher(environment: ["BROWSER": "/nonexistent/browser", "PATH": "/nonexistent"])
        XCTAssertThrowsError(try launcher.open(URL(string: "http://example.com/authorize")!))
        XCTAssertThrowsError(try launcher.open(URL(string: "https://example.com/authorize")!)) { error in
            XCTAssertTrue("\(error)".contains("no browser found"))
        }
        let shellish = ExecBrowserLauncher(environment: ["BROWSER": "firefox %s:/bin/true", "PATH": "/usr/bin:/bin"])
        XCTAssertEqual(try shellish.resolveProgram(), "/bin/true", "entries that need a shell are skipped")
    }
}

final class LockedBox<T>: @unchecked Sendable {
    private let lock = NSLock()
    private var _value: T
    init(_ value: T) { _value = value }
    var value: T { lock.withLock { _value } }
    func mutate(_ body: (inout T) -> Void) { lock.withLock { body(&_value) } }
}
