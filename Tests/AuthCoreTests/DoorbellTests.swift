@testable import AuthCore
import AuthTestSupport
import XCTest

/// The proactive loop's early wake-up, on a clock the test moves: nothing here waits for a timer.
final class DoorbellTests: XCTestCase {
    func testARingEndsAnHourLongSleepAndLeavesNoSpareRing() async {
        let bell = Doorbell()
        let clock = ManualClock()
        let sleeper = Task { await bell.sleep(for: .seconds(3600), on: clock) }
        bell.ring()  // before or during the sleep: either way it ends it
        let woke = await sleeper.value
        XCTAssertTrue(woke)
        // No ring left over: the next sleep runs to its end on the clock (it is not ended by a stale ring).
        let next = Task { await bell.sleep(for: .seconds(50), on: clock) }
        let sleeping = await clock.waitForSleepers(1)
        XCTAssertTrue(sleeping)
        clock.advance(.seconds(49))
        XCTAssertEqual(clock.sleepers, 1, "woke before its time")
        clock.advance(.seconds(1))
        let slept = await next.value
        XCTAssertTrue(slept)
    }

    func testCancellationEndsTheSleepWithFalse() async {
        let bell = Doorbell()
        let clock = ManualClock()
        let sleeper = Task { await bell.sleep(for: .seconds(3600), on: clock) }
        sleeper.cancel()
        let result = await sleeper.value
        XCTAssertFalse(result)
        XCTAssertEqual(clock.sleepers, 0)
    }
}
