import AgentIPC
@testable import AuthCLI
import XCTest

/// Issue 54, item 12: inside an app's sandbox authctl reads from the app's `/.flatpak-info` whether the app may see the
/// agent's socket, to say which permission is missing rather than "not running".
final class SandboxReachTests: XCTestCase {
    func testThePermissionIsReadFromTheAppsFinalContext() {
        let granted = "[Application]\nname=org.example.App\nruntime=runtime/x/x86_64/1\n\n[Instance]\ninstance-id=1\n\n"
            + "[Context]\nshared=network;ipc;\nfilesystems=xdg-download;xdg-run/auth-agent:ro;\n"
        XCTAssertEqual(SandboxReach.read(flatpakInfo: granted).app, "org.example.App")
        XCTAssertEqual(SandboxReach.read(flatpakInfo: granted).showsSocket, true)
        let lacking = granted.replacingOccurrences(of: "xdg-run/auth-agent:ro;", with: "")
        XCTAssertEqual(SandboxReach.read(flatpakInfo: lacking).showsSocket, false)
        XCTAssertEqual(SandboxReach.read(flatpakInfo: "[Context]\nshared=network;\n").showsSocket, false, "no filesystems")
        XCTAssertNil(SandboxReach.read(flatpakInfo: "[Application]\nname=org.example.App\n").showsSocket, "cannot tell")

        let said = SandboxReach.unreachable(app: "org.example.App", socket: "/run/user/1000/auth-agent/agent.sock",
                                            socketShown: false)
        XCTAssertTrue(said.message.contains("lacks the permission `--filesystem=xdg-run/auth-agent:ro`"), said.message)
        XCTAssertTrue(said.hint.contains("flatpak override --user --filesystem=xdg-run/auth-agent:ro org.example.App"), said.hint)
        XCTAssertTrue(said.hint.contains("--talk-name=dev.authagent.Agent"), said.hint)
        XCTAssertFalse((said.message + said.hint).contains("systemctl"))
    }
}
