@testable import AuthTransport
import AuthCore
import Foundation
import NIOCore
import NIOPosix
import XCTest
#if canImport(Glibc)
import Glibc
#endif

/// The real NIO listener on loopback, driven with raw HTTP over a TCP socket.
final class LoopbackListenerTests: XCTestCase {
    /// A TCP connection to the loopback literal, with 5 s send/receive timeouts so no test can hang.
    func connectTo(_ port: Int, v6: Bool = false) -> Int32 {
        let fd = socket(v6 ? AF_INET6 : AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var timeout = timeval(tv_sec: 5, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        let rc: Int32
        if v6 {
            var address = sockaddr_in6()
            address.sin6_family = sa_family_t(AF_INET6)
            address.sin6_port = in_port_t(UInt16(port).bigEndian)
            address.sin6_addr = in6addr_loopback
            rc = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in6>.size)) } }
        } else {
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = in_port_t(UInt16(port).bigEndian)
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            rc = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        }
        XCTAssertEqual(rc, 0, "connect: errno \(errno)")
        return fd
    }

    /// Sends `raw` (MSG_NOSIGNAL: a server that hangs up must not kill the test with SIGPIPE) and reads until the
    /// server closes, resets or 5 s pass.
    func exchange(_ fd: Int32, _ raw: [UInt8]) -> String {
        var sent = 0
        while sent < raw.count {
            let n = raw[sent...].withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if n <= 0 { break }
            sent += n
        }
        var response = [UInt8]()
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = recv(fd, &chunk, chunk.count, 0)
            if n <= 0 { break }
            response += chunk[..<n]
        }
        return String(decoding: response, as: UTF8.self)
    }

    func request(_ port: Int, _ raw: String, v6: Bool = false) throws -> String {
        let fd = connectTo(port, v6: v6)
        defer { close(fd) }
        return exchange(fd, Array(raw.utf8))
    }

    func port(of listener: any RedirectListener) -> Int {
        Int(listener.redirectURI.split(separator: ":").last!.split(separator: "/")[0])!
    }

    func testOnlyExactGETWithMatchingHostReachesTheJudge() async throws {
        let seen = LockedBox<[String?]>([])
        let listener = try await LoopbackRedirectListenerFactory().listen(host: .ipv4, port: 0, path: "/oauth2/callback/work") { query in
            seen.mutate { $0.append(query) }
            return query == "code=good&state=s" ? .success : .invalid
        }
        defer { Task { await listener.close() } }
        XCTAssertTrue(listener.redirectURI.hasPrefix("http://127.0.0.1:"))
        XCTAssertTrue(listener.redirectURI.hasSuffix("/oauth2/callback/work"))
        let port = port(of: listener)
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

    func testBindsTheLiteralWithoutAddressReuse() async throws {
        let listener = try await LoopbackRedirectListenerFactory().listen(host: .ipv4, port: 0, path: "/cb") { _ in .invalid }
        defer { Task { await listener.close() } }
        let channel = try XCTUnwrap(listener as? LoopbackRedirectListener).channel
        XCTAssertEqual(channel.localAddress?.ipAddress, "127.0.0.1", "never a wildcard address")
        // getsockopt on the listening socket itself (RFC 8252 Appendix B.5).
        let reuseAddr = try await channel.getOption(ChannelOptions.socketOption(.so_reuseaddr)).get()
        let reusePort = try await channel.getOption(ChannelOptions.socketOption(NIOBSDSocket.Option(rawValue: SO_REUSEPORT))).get()
        XCTAssertEqual(reuseAddr, 0, "SO_REUSEADDR is off")
        XCTAssertEqual(reusePort, 0, "SO_REUSEPORT is off")
    }

    func testIPv6LiteralWhenPreferred() async throws {
        let seen = LockedBox<[String?]>([])
        let listener = try await LoopbackRedirectListenerFactory().listen(host: .ipv6, port: 0, path: "/cb/work") { query in
            seen.mutate { $0.append(query) }
            return .success
        }
        defer { Task { await listener.close() } }
        XCTAssertTrue(listener.redirectURI.hasPrefix("http://[::1]:"), listener.redirectURI)
        XCTAssertEqual((listener as? LoopbackRedirectListener)?.channel.localAddress?.ipAddress, "::1")
        let port = port(of: listener)
        let wrongHost = try request(port, "GET /cb/work?code=c HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\n\r\n", v6: true)
        XCTAssertTrue(wrongHost.hasPrefix("HTTP/1.1 400"), "the Host must be the literal bound")
        let good = try request(port, "GET /cb/work?code=c HTTP/1.1\r\nHost: [::1]:\(port)\r\n\r\n", v6: true)
        XCTAssertTrue(good.hasPrefix("HTTP/1.1 200"), good)
        XCTAssertEqual(seen.value, ["code=c"])
    }

    func testFallsBackOnlyWhenTheAddressDoesNotExist() async throws {
        let factory = LoopbackRedirectListenerFactory()
        // 192.0.2.1 (TEST-NET-1) is on no interface here: EADDRNOTAVAIL, like 127.0.0.1 on a host without IPv4.
        let listener = try await factory.bind([("192.0.2.1", "192.0.2.1"), ("::1", "[::1]")], port: 0, path: "/cb") { _ in .invalid }
        XCTAssertTrue(listener.redirectURI.hasPrefix("http://[::1]:"), listener.redirectURI)
        // A port that someone else holds is an error, not a reason to move to the other family.
        let taken = port(of: listener)
        do {
            let second = try await factory.listen(host: .ipv6, port: UInt16(taken), path: "/cb") { _ in .invalid }
            await second.close()
            XCTFail("bound \(second.redirectURI) although [::1]:\(taken) is taken")
        } catch {
            XCTAssertEqual(error.code, .loginFailed)
        }
        await listener.close()
    }

    func testConnectionsAreClosedAtTheDeadline() async throws {
        var limits = LoopbackRedirectListenerFactory.Limits()
        XCTAssertEqual(limits.connectionDeadline, .seconds(10))
        limits.connectionDeadline = .milliseconds(300)
        let listener = try await LoopbackRedirectListenerFactory(limits: limits).listen(host: .ipv4, port: 0, path: "/cb") { _ in .invalid }
        defer { Task { await listener.close() } }
        let started = ContinuousClock.now
        let fd = connectTo(port(of: listener))
        defer { close(fd) }
        var byte: UInt8 = 0
        XCTAssertEqual(recv(fd, &byte, 1, 0), 0, "the server closed the idle connection")
        let elapsed = ContinuousClock.now - started
        XCTAssertGreaterThanOrEqual(elapsed, .milliseconds(250))
        XCTAssertLessThan(elapsed, .seconds(3))
    }

    func testHostileClientsDoNotBlockTheRedirect() async throws {
        let seen = LockedBox<[String?]>([])
        let listener = try await LoopbackRedirectListenerFactory().listen(host: .ipv4, port: 0, path: "/cb/work") { query in
            seen.mutate { $0.append(query) }
            return query == "code=good&state=s" ? .success : .invalid
        }
        defer { Task { await listener.close() } }
        let port = port(of: listener)
        // 100 connections that send nothing, and 20 that stop in the middle of a request line.
        var held: [Int32] = (0..<100).map { _ in connectTo(port) }
        for _ in 0..<20 {
            let fd = connectTo(port)
            _ = "GET /cb/work?code=".withCString { send(fd, $0, strlen($0), Int32(MSG_NOSIGNAL)) }
            held.append(fd)
        }
        defer { held.forEach { close($0) } }

        // A 1 MB request line is cut off at the byte cap with 431 (or a reset, if the kernel sees unread data).
        let started = ContinuousClock.now
        let hugeFD = connectTo(port)
        defer { close(hugeFD) }
        let huge = exchange(hugeFD, Array("GET /cb/work?code=\(String(repeating: "A", count: 1 << 20)) HTTP/1.1\r\n\r\n".utf8))
        XCTAssertTrue(huge.isEmpty || huge.hasPrefix("HTTP/1.1 431"), String(huge.prefix(80)))
        XCTAssertLessThan(ContinuousClock.now - started, .seconds(3), "rejected at once, not at the deadline")
        let manyHeaders = (0..<100).map { "X-H\($0): v\r\n" }.joined()
        let crowded = try request(port, "GET /cb/work?code=good&state=s HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\n\(manyHeaders)\r\n")
        XCTAssertTrue(crowded.hasPrefix("HTTP/1.1 431"), crowded)

        let good = try request(port, "GET /cb/work?code=good&state=s HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\n\r\n")
        XCTAssertTrue(good.hasPrefix("HTTP/1.1 200"), good)
        XCTAssertEqual(seen.value, ["code=good&state=s"], "only the real redirect reached the judge")
    }

    /// A listener whose connections never reach their deadline during a test, on one event loop so connections are
    /// accepted (and admitted) in the order they were made.
    func cappedListener(max: Int, judge: @escaping @Sendable (String?) -> RedirectPage) async throws -> LoopbackRedirectListener {
        var limits = LoopbackRedirectListenerFactory.Limits()
        XCTAssertEqual(limits.maxConnections, 64)
        limits.maxConnections = max
        limits.connectionDeadline = .hours(1)
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let listener = try await LoopbackRedirectListenerFactory(group: group, limits: limits)
            .listen(host: .ipv4, port: 0, path: "/cb/work", judge: judge)
        return try XCTUnwrap(listener as? LoopbackRedirectListener)
    }

    /// recv on a connection the server has closed returns 0 (or ECONNRESET, had it unread bytes); on an open one,
    /// MSG_DONTWAIT says EAGAIN, and a blocking recv waits out the 5 s receive timeout.
    func isClosedByServer(_ fd: Int32, wait: Bool) -> Bool {
        var byte: UInt8 = 0
        let n = recv(fd, &byte, 1, wait ? 0 : Int32(MSG_DONTWAIT))
        return n == 0 || (n < 0 && errno == ECONNRESET)
    }

    func testConnectionCapDropsTheOldestAndTheRedirectStillArrives() async throws {
        let listener = try await cappedListener(max: 8) { $0 == "code=good&state=s" ? .success : .invalid }
        defer { Task { await listener.close() } }
        let port = port(of: listener)
        // 20 local clients that hold a connection and send nothing (or half a request line).
        let held: [Int32] = (0..<20).map { index in
            let fd = connectTo(port)
            if index % 2 == 1 { _ = "GET /cb/work?code=".withCString { send(fd, $0, strlen($0), Int32(MSG_NOSIGNAL)) } }
            return fd
        }
        defer { held.forEach { close($0) } }
        let good = try request(port, "GET /cb/work?code=good&state=s HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\n\r\n")
        XCTAssertTrue(good.hasPrefix("HTTP/1.1 200"), "the real redirect got through a full listener: \(good.prefix(80))")
        // The real redirect's connection took the 8th slot, so the 13 oldest were dropped and the 7 newest remain.
        for (index, fd) in held.enumerated() {
            if index < 13 {
                XCTAssertTrue(isClosedByServer(fd, wait: true), "connection \(index) (old) was not dropped")
            } else {
                XCTAssertFalse(isClosedByServer(fd, wait: false), "connection \(index) (recent) was dropped")
            }
        }
        XCTAssertLessThanOrEqual(listener.connections.count, 8, "never more than the cap")
    }

    func testClosingTheListenerClosesTheConnectionsItAccepted() async throws {
        let listener = try await cappedListener(max: 64) { _ in .invalid }
        let port = port(of: listener)
        let held: [Int32] = (0..<6).map { index in
            let fd = connectTo(port)
            if index == 5 { _ = "GET /cb/work?code=".withCString { send(fd, $0, strlen($0), Int32(MSG_NOSIGNAL)) } }
            return fd
        }
        defer { held.forEach { close($0) } }
        // One full exchange, so all six earlier connections have been accepted (one event loop, in order).
        let other = try request(port, "GET /favicon.ico HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\n\r\n")
        XCTAssertTrue(other.hasPrefix("HTTP/1.1 404"), other)
        XCTAssertGreaterThanOrEqual(listener.connections.count, 6, "the idle ones are held until the listener closes")
        await listener.close()
        for (index, fd) in held.enumerated() {
            // The deadline is an hour: only the listener's close can end these within the 5 s receive timeout.
            XCTAssertTrue(isClosedByServer(fd, wait: true), "connection \(index) outlived the listener")
        }
        XCTAssertEqual(listener.connections.count, 0)
    }

    func testBrowserLauncherRefusesNonHTTPSAndUsesNoShell() async throws {
        let launcher = ExecBrowserLauncher(environment: ["BROWSER": "/nonexistent/browser", "PATH": "/nonexistent"])
        do {
            try await launcher.open(URL(string: "http://example.com/authorize")!)
            XCTFail("plain http to a non-loopback host was opened")
        } catch {
            XCTAssertTrue(error.message.contains("refusing"), error.message)
        }
        do {
            try await launcher.open(URL(string: "https://example.com/authorize")!)
            XCTFail("opened without a browser")
        } catch {
            XCTAssertTrue(error.message.contains("no browser found"), error.message)
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
