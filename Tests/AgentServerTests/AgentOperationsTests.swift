import AgentIPC
import AgentServer
@testable import AgentService
import AuthCore
import XCTest

final class AgentOperationsTests: XCTestCase {
    /// Every domain error has its own stable wire code (and so its own D-Bus error name).
    func testEveryAuthErrorCodeMapsOntoItsWireCode() {
        for code in AuthError.Code.allCases {
            XCTAssertEqual(AgentOperations.wireCode(code).rawValue, code.rawValue, "\(code)")
        }
    }
}
