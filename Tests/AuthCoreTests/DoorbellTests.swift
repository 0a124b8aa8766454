@testable import AuthCore
import XCTest

/// The proactive loop's early wake-up: nothing here waits for a timer.
final class DoorbellTests: XCTestCase {
    func testARingEndsAnHourLongSleepAndLeavesNoSpareRing() async {
        let bell = Doorbell()
        let sleeper = Task { await bell.sleep(for: .seconds(3600)) }
        bell.ring()  // before or during the sleep: either way it ends it
        let woke = await sleeper.value
        XCTAssertTrue(woke)
        // No ring left over: a short sleep now runs to its end (it is not ended by a stale ring).
        let clock = ContinuousClock()
        let started = clock.now
        let slept = await bell.sleep(for: .milliseconds(50))
        XCTAssertTrue(slept)
        XCTAssertGreaterThanOrEqual(clock.now - started, .milliseconds(50))
    }

    func testCancellationEndsTheSleepWithFalse() async {
        let bell = Doorbell()
        let sleeper = Task { await bell.sleep(for: .seconds(3600)) }
        sleeper.cancel()
        let result = await sleeper.value
        XCTAssertFalse(result)
    }
}
