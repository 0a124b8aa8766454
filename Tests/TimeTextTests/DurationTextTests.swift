import TimeText
import XCTest

/// The spellings `authctl audit --since` and the config's durations accept, and those they refuse.
final class DurationTextTests: XCTestCase {
    func testSinceDurations() {
        XCTAssertEqual(DurationText.seconds("90s"), 90)
        XCTAssertEqual(DurationText.seconds("15m"), 900)
        XCTAssertEqual(DurationText.seconds("1h"), 3600)
        XCTAssertEqual(DurationText.seconds("2d"), 172_800)
        XCTAssertEqual(DurationText.seconds("42"), 42)
        for bad in ["", "h", "-1h", "1.5h", "1w", "one", "1h30m", "99999999999999999999d"] {
            XCTAssertNil(DurationText.seconds(bad), bad)
        }
    }
}
