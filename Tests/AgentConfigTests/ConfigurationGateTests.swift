@testable import AgentConfig
import AgentIPC
import Synchronization
import XCTest

/// ``ConfigurationGate``: a broken start-up file fails every request until it is fixed; a failed reload of a
/// configuration in force does not.
final class ConfigurationGateTests: XCTestCase {
    /// A file whose outcome the test sets; counts the reads.
    final class ScriptedSource: ConfigurationSource {
        let outcome = Mutex<Result<ReloadResult, WireError>>(.success(ReloadResult(path: "c.toml", accounts: [])))
        let reads = Mutex(0)
        func reload(ifChanged: Bool) async throws(WireError) -> ReloadResult {
            reads.withLock { $0 += 1 }
            return try outcome.withLock { $0 }.get()
        }
    }

    let broken = WireError(.configError, "c.toml:3: unknown key 'x'")

    func testBrokenAtStartFailsEveryRequestUntilTheFileIsFixed() async throws {
        let source = ScriptedSource()
        source.outcome.withLock { $0 = .failure(broken) }
        let changes = Mutex(0)
        let gate = ConfigurationGate(source: source, problem: broken, onChange: { changes.withLock { $0 += 1 } })
        do {
            try await gate.admit()
            XCTFail("admitted while broken")
        } catch {
            XCTAssertEqual(error, broken)
        }
        XCTAssertEqual(changes.withLock { $0 }, 0, "the same problem is no change")

        source.outcome.withLock { $0 = .success(ReloadResult(path: "c.toml", accounts: ["work"], added: ["work"])) }
        try await gate.admit()
        XCTAssertNil(gate.currentProblem)
        XCTAssertEqual(changes.withLock { $0 }, 1)
        let reads = source.reads.withLock { $0 }
        try await gate.admit()
        XCTAssertEqual(source.reads.withLock { $0 }, reads, "a configuration in force is not read again per request")
    }

    func testAFailedReloadKeepsTheConfigurationInForce() async throws {
        let source = ScriptedSource()
        let gate = ConfigurationGate(source: source)
        source.outcome.withLock { $0 = .failure(broken) }
        do {
            _ = try await gate.reload()
            XCTFail("an invalid file was accepted")
        } catch {
            XCTAssertEqual(error.code, "config_error")
        }
        XCTAssertNil(gate.currentProblem, "the old configuration keeps serving")
        try await gate.admit()
    }

    func testNoSourceMeansReloadIsRefused() async {
        let gate = ConfigurationGate(source: nil)
        do {
            _ = try await gate.reload()
            XCTFail("reload without a file")
        } catch {
            XCTAssertEqual(error.code, "config_error")
        }
    }
}
