import AuthCLI
import XCTest

final class SignInChoiceTests: XCTestCase {
    func testFlagsWinOverTheEnvironment() {
        let desktop = ["DISPLAY": ":0"]
        XCTAssertEqual(SignInChoice.choose(device: true, noBrowser: false, environment: desktop), .device)
        XCTAssertEqual(SignInChoice.choose(device: true, noBrowser: false, environment: [:]), .device)
        XCTAssertEqual(SignInChoice.choose(device: false, noBrowser: true, environment: [:]), .paste)
        XCTAssertEqual(SignInChoice.choose(device: false, noBrowser: true, environment: desktop), .paste)
    }

    func testDesktopSessionUsesTheBrowser() {
        XCTAssertEqual(SignInChoice.choose(device: false, noBrowser: false, environment: ["DISPLAY": ":0"]), .redirect)
        XCTAssertEqual(SignInChoice.choose(device: false, noBrowser: false, environment: ["WAYLAND_DISPLAY": "wayland-0"]), .redirect)
    }

    func testHeadlessOrSSHPrefersTheDeviceGrant() {
        XCTAssertEqual(SignInChoice.choose(device: false, noBrowser: false, environment: [:]), .preferDevice)
        XCTAssertEqual(SignInChoice.choose(device: false, noBrowser: false, environment: ["DISPLAY": ""]), .preferDevice)
        XCTAssertEqual(SignInChoice.choose(device: false, noBrowser: false,
                                           environment: ["DISPLAY": "localhost:10.0", "SSH_CONNECTION": "10.0.0.2 5555 10.0.0.1 22"]),
                       .preferDevice)
    }
}
