@testable import KeyringStore
import Foundation
import XCTest

/// "did not answer within N s": whole seconds as they are, else one decimal as printf's "%.1f" gave it, except
/// that an exact half rounds up (printf rounds the nearest double, which may lie below it: 0.15 s gave "0.1").
final class DurationTextTests: XCTestCase {
    func testHalvesRoundUp() {
        XCTAssertEqual(Duration.milliseconds(50).secondsText, "0.1")
        XCTAssertEqual(Duration.milliseconds(150).secondsText, "0.2")
        XCTAssertEqual(Duration.milliseconds(250).secondsText, "0.3")
    }

    func testSecondsTextMatchesPrintf() {
        let durations: [Duration] = [.seconds(25), .zero, .milliseconds(2500), .milliseconds(1500), .milliseconds(40),
                                     .milliseconds(1049), .milliseconds(1051), .milliseconds(99_960), .microseconds(1)]
        for duration in durations {
            let (seconds, attoseconds) = duration.components
            let printf = attoseconds == 0 ? "\(seconds)" : String(format: "%.1f", Double(seconds) + Double(attoseconds) / 1e18)
            XCTAssertEqual(duration.secondsText, printf, "\(duration)")
        }
    }
}
