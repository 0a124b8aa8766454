import AgentRuntime
@testable import AgentLifecycle
@testable import AgentAccess
import XCTest

final class IdlePolicyTests: XCTestCase {
    let start = ContinuousClock.now

    func testExitsOnlyAfterTheWholeIdlePeriod() {
        XCTAssertEqual(IdlePolicy.wait(now: start + .seconds(100), lastActive: start, busy: false, timeout: .seconds(600)),
                       .seconds(500))
        XCTAssertNil(IdlePolicy.wait(now: start + .seconds(600), lastActive: start, busy: false, timeout: .seconds(600)))
        XCTAssertNil(IdlePolicy.wait(now: start + .seconds(7000), lastActive: start, busy: false, timeout: .seconds(600)))
    }

    func testNeverWhileBusy() {
        // A client connected, a D-Bus call, a sign-in pending or a refresh running: look again soon, never exit.
        XCTAssertEqual(IdlePolicy.wait(now: start + .seconds(7000), lastActive: start, busy: true, timeout: .seconds(600)),
                       .seconds(5))
        XCTAssertEqual(IdlePolicy.wait(now: start + .seconds(7000), lastActive: start, busy: true, timeout: .seconds(2)),
                       .seconds(2))
    }

    func testNeverWhileASignInLivesInMemoryOnly() {
        // An exit would lose it: stay, and ask again every 30 s (it may move to a Secret Service, or be signed out).
        XCTAssertEqual(IdlePolicy.wait(now: start + .seconds(7000), lastActive: start, busy: false, holding: true,
                                       timeout: .seconds(600)), .seconds(30))
        XCTAssertEqual(IdlePolicy.wait(now: start + .seconds(100), lastActive: start, busy: false, holding: true,
                                       timeout: .seconds(600)), .seconds(500), "before the idle period ends, as ever")
        XCTAssertNil(IdlePolicy.wait(now: start + .seconds(7000), lastActive: start, busy: false, holding: false,
                                     timeout: .seconds(600)), "moved or signed out: the idle exit is back")
    }

    func testTrackerCountsClientsAndRemembersTheLastOne() {
        let tracker = ActivityTracker(now: start)
        tracker.begin()
        tracker.begin()
        XCTAssertEqual(tracker.snapshot.active, 2)
        tracker.end(now: start + .seconds(3))
        tracker.end(now: start + .seconds(9))
        XCTAssertEqual(tracker.snapshot.active, 0)
        XCTAssertEqual(tracker.snapshot.lastActive, start + .seconds(9))
    }
}
