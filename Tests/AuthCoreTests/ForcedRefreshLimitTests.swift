import AuthCore
import AuthTestSupport
import XCTest

/// Issue 53: confined callers' forced refreshes, at most one per account per interval for all of them together (on the
/// manual clock).
final class ForcedRefreshLimitTests: XCTestCase {
    func testOneForcedRefreshPerAccountPerInterval() {
        let clock = ManualClock()
        let limit = ForcedRefreshLimit(time: clock)
        XCTAssertEqual(limit.interval, .seconds(60))
        XCTAssertTrue(limit.admit("work"), "the first one is honoured")
        for _ in 0..<99 { XCTAssertFalse(limit.admit("work"), "the rest within the minute are not") }
        XCTAssertTrue(limit.admit("home"), "each account has its own")
        clock.advance(.seconds(59))
        XCTAssertFalse(limit.admit("work"))
        clock.advance(.seconds(1))
        XCTAssertTrue(limit.admit("work"), "a minute after the last honoured one")
        XCTAssertFalse(limit.admit("work"), "which starts the next minute")
        XCTAssertTrue(limit.admit("home"))
    }
}
