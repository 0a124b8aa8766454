@testable import AgentDBus
import XCTest

final class SystemEventTests: XCTestCase {
    func testPrepareForSleepMapsBothWays() {
        XCTAssertEqual(SystemEvent.prepareForSleep(true), .suspending)
        XCTAssertEqual(SystemEvent.prepareForSleep(false), .resumed)
    }

    func testOnlyGlobalConnectivityIsNetworkUp() {
        XCTAssertEqual(SystemEvent.networkState(70), .networkUp)
        // NM_STATE_UNKNOWN, ASLEEP, DISCONNECTED, DISCONNECTING, CONNECTING, CONNECTED_LOCAL, CONNECTED_SITE
        for state: UInt32 in [0, 10, 20, 30, 40, 50, 60] {
            XCTAssertNil(SystemEvent.networkState(state), "state \(state)")
        }
    }
}
