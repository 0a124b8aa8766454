#if canImport(Glibc)
import Glibc
#endif
import AgentIPC
@testable import AgentServer
@testable import AuthCore
import Foundation
import XCTest

/// Issue 53: confined callers' share of the connection cap, on the real socket, with a real sandboxed client: the
/// host's python3 in a bubblewrap sandbox shaped like Flatpak's (a tmpfs root with `/.flatpak-info`), which the
/// agent names `flatpak:org.example.App`, a confined caller.
extension SocketServerTests {
    /// A cap of 8: the app's 8 connections, each waiting for consent, get 2 (a quarter); the other 6 are refused
    /// `agent_busy` at once. The desktop (this process) fills the rest with requests that wait for consent too; with
    /// every connection busy, its next connection is served and the app's oldest connection is closed for it, never a
    /// desktop one. Before: the app held all 8 and the desktop got `agent_busy`.
    func testConfinedCallersShareAQuarterOfTheCapAndMakeRoomForTheDesktop() async throws {
        let server = try await start(policy: AccessPolicy(confirm: .firstUse), connectionLimit: 8)
        let app = try SandboxedApp(socket: path, connections: 8, in: directory)
        defer { app.stop() }
        let kinds = try await app.line()
        XCTAssertEqual(kinds.split(separator: " ").filter { $0 == "asked" }.count, 2, kinds)
        XCTAssertEqual(kinds.split(separator: " ").filter { $0 == "busy" }.count, 6, kinds)
        var desktop: [TestClient] = []
        for id in 1...6 {
            let client = try await TestClient.connect(path)
            try await client.send(SocketServerTests.fast(id) + "\n")
            let event = try await client.readLine()
            XCTAssertTrue(event?.contains("consent_required") == true, "desktop request \(id): \(event ?? "nothing")")
            desktop.append(client)
        }
        XCTAssertEqual(server.loop.openConnections.load(ordering: .relaxed), 8, "the premise: full, every connection busy")
        let next = try await TestClient.connect(path)
        try await next.send(#"{"v":1,"id":7,"op":"ping"}"# + "\n")
        let id = try await next.readID()
        XCTAssertEqual(id, 7, "the desktop was refused")
        let closed = try await app.line()
        XCTAssertEqual(closed, "closed 0", "the app's oldest connection makes room")
        XCTAssertEqual(server.loop.openConnections.load(ordering: .relaxed), 8)
        try await desktop[0].send(#"{"v":1,"id":8,"op":"ping"}"# + "\n")
        let stillOpen = try await desktop[0].readID()
        XCTAssertEqual(stillOpen, 8, "a desktop connection was closed")
    }
}

/// python3 in a Flatpak-shaped bubblewrap sandbox (`--unshare-user --disable-userns`, a tmpfs root with /usr, /etc,
/// /proc, /dev, the socket's directory and `/.flatpak-info`) that opens `connections` connections to
/// the socket, each asking for a token of `work`; it prints one line with `asked`, `busy` or `other` per connection
/// (its first reply line), then `closed N` for each the agent closes, until its stdin closes. It stays in the test's
/// pid namespace, as Flatpak's D-Bus proxy does: a sandbox in a pid namespace of its own is an app only with its
/// instance's `bwrapinfo.json` in the agent's runtime directory (``FlatpakInstance``; the end-to-end tests make one).
final class SandboxedApp: @unchecked Sendable {
    static let script = """
    import json, os, select, socket, sys
    path, count = sys.argv[1], int(sys.argv[2])
    conns = []
    for n in range(count):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(path)
        try:
            s.sendall(b'{"v":1,"id":1,"op":"token","account":"work"}\\n')
        except OSError:  # refused as it connected: the refusal is still there to read
            pass
        conns.append(s)
    kinds = []
    for s in conns:
        s.settimeout(20)  # a reply that never comes ends the script, and so the test, instead of hanging it
        line = s.makefile("rb").readline()
        s.settimeout(None)
        kinds.append("asked" if b"consent_required" in line else "busy" if b"agent_busy" in line else "other")
    print(" ".join(kinds), flush=True)
    live = {n for n, k in enumerate(kinds) if k == "asked"}
    while True:
        ready, _, _ = select.select([sys.stdin] + [conns[n] for n in live], [], [])
        if sys.stdin in ready and not os.read(0, 1):
            break
        for n in sorted(live):
            if conns[n] in ready and not conns[n].recv(65536):
                live.discard(n)
                print("closed %d" % n, flush=True)
    """

    let process = Process()
    let input = Pipe()
    let output = Pipe()
    private var buffered: [UInt8] = []

    init(socket path: String, connections: Int, in directory: String) throws {
        let info = directory + "/flatpak-info"
        try "[Application]\nname=org.example.App\n\n[Instance]\ninstance-id=42\n".write(toFile: info, atomically: true, encoding: .utf8)
        var tree = ["--ro-bind", "/usr", "/usr", "--ro-bind", "/etc", "/etc"]
        for top in ["/lib", "/lib64", "/bin", "/sbin"] {
            if let target = try? FileManager.default.destinationOfSymbolicLink(atPath: top) {
                tree += ["--symlink", target, top]
            } else if FileManager.default.fileExists(atPath: top) {
                tree += ["--ro-bind", top, top]
            }
        }
        // `/.flatpak-info` is read only on the sandbox's tmpfs (docs/SECURITY.md): bwrap writes it there from fd 3.
        process.executableURL = URL(fileURLWithPath: "/bin/sh")
        process.arguments = ["-c", #"exec 3<"$0"; exec "$@""#, info, "/usr/bin/bwrap", "--unshare-user", "--disable-userns",
                             "--die-with-parent"] + tree
            + ["--proc", "/proc", "--dev", "/dev", "--bind", directory, directory, "--ro-bind-data", "3", "/.flatpak-info",
               "/usr/bin/python3", "-c", SandboxedApp.script, path, "\(connections)"]
        process.standardInput = input
        process.standardOutput = output
        try process.run()
    }

    /// Its next line (20 s at most).
    func line() async throws -> String {
        let handle = output.fileHandleForReading
        return try await withCheckedThrowingContinuation { continuation in
            Thread.detachNewThread {
                let deadline = Date().addingTimeInterval(20)
                while Date() < deadline {
                    if let newline = self.buffered.firstIndex(of: 0x0A) {
                        let line = String(decoding: self.buffered[..<newline], as: UTF8.self)
                        self.buffered.removeSubrange(...newline)
                        return continuation.resume(returning: line)
                    }
                    let chunk = handle.availableData
                    if chunk.isEmpty { break }
                    self.buffered += chunk
                }
                struct NoLine: Error {}
                continuation.resume(throwing: NoLine())
            }
        }
    }

    func stop() {
        try? input.fileHandleForWriting.close()
        process.waitUntilExit()
    }
}
