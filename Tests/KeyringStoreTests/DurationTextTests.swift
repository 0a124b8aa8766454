@testable import KeyringStore
import Foundation
import XCTest

/// "did not answer within N s": whole seconds as they are, else one decimal as printf's "%.1f" gives it.
final class DurationTextTests: XCTestCase {
    func testSecondsTextMatchesPrintf() {
        let durations: [Duration] = [.seconds(25), .zero, .milliseconds(2500), .milliseconds(250), .milliseconds(50),
                                     .milliseconds(1049), .milliseconds(1051), .milliseconds(99_960), .microseconds(1)]
        for duration in durations {
            let (seconds, attoseconds) = duration.components
            let printf = attoseconds == 0 ? "\(seconds)" : String(format: "%.1f", Double(seconds) + Double(attoseconds) / 1e18)
            XCTAssertEqual(duration.secondsText, printf, "\(duration)")
        }
    }
}
