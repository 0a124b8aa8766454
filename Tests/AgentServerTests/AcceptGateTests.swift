@testable import AgentServer
@testable import AgentService
import XCTest

/// ``AcceptGate``'s count, as the accept loops and the connections' closes drive it: a slot is taken before each
/// accept and refused at the ceiling (which pauses accepting), a connection counts until its descriptor is closed
/// (not when the agent decided to close it), and accepting resumes once the count is back under the ceiling.
final class AcceptGateTests: XCTestCase {
    func testPausesAtTheCeilingAndResumesWhenAConnectionHasClosed() {
        let gate = AcceptGate(ceiling: 3)
        XCTAssertEqual((0..<3).map { _ in gate.reserve() }, [true, true, true])
        XCTAssertFalse(gate.isPaused, "at the ceiling but nobody asked for more")
        XCTAssertFalse(gate.reserve(), "a fourth slot is refused")
        XCTAssertTrue(gate.isPaused)
        XCTAssertEqual(gate.open.load(ordering: .relaxed), 3)

        XCTAssertTrue(gate.closed(), "one closed while paused: ask the loops to resume")
        XCTAssertTrue(gate.resume())
        XCTAssertFalse(gate.isPaused)
        XCTAssertEqual(gate.open.load(ordering: .relaxed), 2)
        XCTAssertEqual(gate.pauses.load(ordering: .relaxed), 1)
        XCTAssertEqual(gate.peak.load(ordering: .relaxed), 3)
        XCTAssertTrue(gate.reserve())
        XCTAssertFalse(gate.unreserve(), "nothing to accept after all: the slot is returned, not paused")
        XCTAssertEqual(gate.open.load(ordering: .relaxed), 2)
    }

    func testPausesOnceAndResumesOnlyUnderTheCeiling() {
        let gate = AcceptGate(ceiling: 2)
        XCTAssertEqual((0..<4).map { _ in gate.reserve() }, [true, true, false, false])
        XCTAssertEqual(gate.pauses.load(ordering: .relaxed), 1, "paused once, not once per refusal")
        XCTAssertFalse(gate.resume(), "a resume asked for at the ceiling is refused")
        XCTAssertTrue(gate.isPaused)
        XCTAssertTrue(gate.closed())
        XCTAssertTrue(gate.resume())
        XCTAssertTrue(gate.resume(), "a second loop resumes too")
        XCTAssertFalse(gate.isPaused)
    }

    /// Loops on several threads taking slots at once never pass the ceiling.
    func testConcurrentReservationsNeverPassTheCeiling() {
        let gate = AcceptGate(ceiling: 50)
        DispatchQueue.concurrentPerform(iterations: 8) { _ in
            for _ in 0..<1000 where gate.reserve() {
                if Bool.random() { _ = gate.closed() }
            }
        }
        XCTAssertLessThanOrEqual(gate.peak.load(ordering: .relaxed), 50)
        XCTAssertLessThanOrEqual(gate.open.load(ordering: .relaxed), 50)
    }
}
