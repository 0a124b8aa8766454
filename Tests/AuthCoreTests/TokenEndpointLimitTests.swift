import AuthCore
import AuthTestSupport
import XCTest

/// Issue 53: confined callers' forced refreshes, at most one per account per interval for all of them together (on the
/// manual clock).
final class TokenEndpointLimitTests: XCTestCase {
    func testOneForcedRefreshPerAccountPerInterval() {
        let clock = ManualClock()
        let limit = TokenEndpointLimit(time: clock)
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
    /// Tokens of new scope or resource sets: four per account per minute, the fifth told when it may ask again.
    func testSeveralPerIntervalAndWhenTheNextIs() {
        let clock = ManualClock()
        let limit = TokenEndpointLimit(perInterval: 4, time: clock)
        for n in 0..<4 {
            XCTAssertNil(limit.retryAfter("work"), "call \(n)")
            clock.advance(.seconds(10))
        }
        XCTAssertEqual(limit.retryAfter("work"), .seconds(20), "the oldest of the four leaves the minute in 20 s")
        XCTAssertFalse(limit.admit("work"))
        XCTAssertTrue(limit.admit("home"))
        clock.advance(.seconds(20))
        XCTAssertTrue(limit.admit("work"))
        XCTAssertEqual(limit.retryAfter("work"), .seconds(10))
    }
}
