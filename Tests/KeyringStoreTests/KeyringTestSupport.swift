import AuthCore
import Foundation
import KeyringStore
import XCTest

/// The environment of the real-keyring tests. They run only under `scripts/with-keyring`, which starts a throwaway
/// gnome-keyring on a private session bus and sets `AUTH_AGENT_TEST_KEYRING=1`. Without it they skip; with it, a
/// keyring that does not work is a failure, never a skip.
enum KeyringTest {
    static let environment = ProcessInfo.processInfo.environment

    static var enabled: Bool { environment["AUTH_AGENT_TEST_KEYRING"] == "1" }

    /// Skips without `AUTH_AGENT_TEST_KEYRING=1`; throws (a failure) when it is set but the keyring is not usable.
    static func require(file: StaticString = #filePath, line: UInt = #line) async throws {
        guard enabled else {
            throw XCTSkip("""
                needs a real GNOME keyring: run `scripts/with-keyring swift test --filter KeyringStoreTests` \
                (AUTH_AGENT_TEST_KEYRING=1 is not set)
                """, file: file, line: line)
        }
        guard environment["DBUS_SESSION_BUS_ADDRESS"] != nil else {
            throw Broken("AUTH_AGENT_TEST_KEYRING=1 but DBUS_SESSION_BUS_ADDRESS is not set")
        }
        let state = await LibsecretStore(timeout: .seconds(5)).state()
        guard state == .available else {
            throw Broken("AUTH_AGENT_TEST_KEYRING=1 but the keyring's state is \(state), not available")
        }
    }

    struct Broken: Error, CustomStringConvertible {
        var description: String
        init(_ description: String) { self.description = description }
    }

    /// A key no other test (or earlier run) uses.
    static func uniqueKey(_ function: String = #function) -> SecretKey {
        SecretKey(
            account: "\(function.prefix { $0 != "(" })-\(UUID().uuidString.prefix(8))",
            issuer: "https://issuer.test/realms/a",
            clientID: "client-1")
    }

    /// `scripts/with-keyring` in this checkout.
    static var withKeyringScript: String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("scripts/with-keyring").path
    }

    /// The fake Secret Service that stalls on cue (`Tests/Fixtures/secretservice/fake_secret_service.py`).
    static var fakeSecretService: String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Fixtures/secretservice/fake_secret_service.py").path
    }

    /// This test binary, to re-run one probe test in a child process on another bus.
    static var testExecutable: String {
        (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
    }
}

/// The result of a child process: exit status and stdout+stderr interleaved.
struct ProcessResult {
    var status: Int32
    var output: String
}

/// Runs a program (no shell) with extra environment variables, and `input` (if any) on its stdin, and waits for it.
func runProcess(_ arguments: [String], environment extra: [String: String] = [:],
                removing: [String] = [], input: String? = nil) throws -> ProcessResult {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
    process.arguments = arguments
    var environment = ProcessInfo.processInfo.environment
    for name in removing { environment.removeValue(forKey: name) }
    environment.merge(extra) { $1 }
    process.environment = environment
    let pipe = Pipe()
    process.standardOutput = pipe
    process.standardError = pipe
    let stdin = input.map { _ in Pipe() }
    process.standardInput = stdin ?? FileHandle.nullDevice
    try process.run()
    if let stdin, let input {
        stdin.fileHandleForWriting.write(Data(input.utf8))
        try stdin.fileHandleForWriting.close()
    }
    let data = pipe.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    return ProcessResult(status: process.terminationStatus, output: String(decoding: data, as: UTF8.self))
}

/// Asserts that `body` throws an ``AuthError`` with `code`, and returns it.
@discardableResult
func assertThrows<T>(_ code: AuthError.Code, file: StaticString = #filePath, line: UInt = #line,
                     _ body: () async throws(AuthError) -> T) async -> AuthError? {
    do {
        let value = try await body()
        XCTFail("expected \(code.rawValue), got a value: \(value)", file: file, line: line)
        return nil
    } catch {
        XCTAssertEqual(error.code, code, "\(error)", file: file, line: line)
        return error
    }
}

/// Milliseconds since `start`.
func milliseconds(since start: ContinuousClock.Instant) -> Double {
    let elapsed = ContinuousClock.now - start
    return Double(elapsed.components.seconds) * 1000 + Double(elapsed.components.attoseconds) / 1e15
}
