import TimeText
import XCTest

/// The one day count (issue 35): whole seconds, rounded down, the same from `Int` seconds (authctl) and from a
/// `Date`'s seconds with a fraction (the agent).
final class DaysLeftTests: XCTestCase {
    let now = 1_800_000_000

    func testWholeDaysRoundedDown() {
        XCTAssertEqual(DaysLeft.count(until: now + 2 * 86400, now: now), 2)
        XCTAssertEqual(DaysLeft.count(until: now + 2 * 86400 - 1, now: now), 1, "never more time than there is")
        XCTAssertEqual(DaysLeft.count(until: now + 86399, now: now), 0)
        XCTAssertEqual(DaysLeft.count(until: now - 86400 * 3, now: now), 0, "passed")
    }

    func testAFractionOfASecondDoesNotChangeTheCount() {
        let until = Double(now + 2 * 86400)
        for fraction in [0.0, 0.001, 0.5, 0.999] {
            XCTAssertEqual(DaysLeft.count(until: until, now: Double(now) + fraction),
                           DaysLeft.count(until: now + 2 * 86400, now: now), "\(fraction)")
        }
        XCTAssertEqual(DaysLeft.count(until: Double.nan, now: Double(now)), 0, "never traps")
    }

    func testPhrase() {
        XCTAssertEqual(DaysLeft.phrase(2), "in 2 days")
        XCTAssertEqual(DaysLeft.phrase(1), "in 1 day")
        XCTAssertNil(DaysLeft.phrase(0))
    }
}
