@testable import AgentAccess
import XCTest

/// AppArmor labels as `/proc/PID/attr/current` reads them (the kernel ends the text with a newline), in the shapes
/// snapd's profiles take (`snap.NAME.APP`, `snap.NAME.hook.HOOK`, parallel installs `NAME_KEY`); no snapd on the test
/// machines.
final class SnapLabelTests: XCTestCase {
    func testAStrictSnapsAppAndHook() {
        XCTAssertEqual(SnapLabel(label: "snap.firefox.firefox (enforce)\n"),
                       SnapLabel(snap: "firefox", app: "firefox", isHook: false, mode: "enforce"))
        XCTAssertTrue(SnapLabel(label: "snap.firefox.firefox (enforce)\n")?.isStrict == true)
        XCTAssertEqual(SnapLabel(label: "snap.thunderbird.hook.configure (enforce)\n"),
                       SnapLabel(snap: "thunderbird", app: "configure", isHook: true, mode: "enforce"))
        XCTAssertEqual(SnapLabel(label: "snap.code_insiders.code-url-handler (enforce)")?.snap, "code_insiders")
        XCTAssertEqual(SnapLabel(label: "snap.1password.1password (enforce)")?.snap, "1password")
    }

    func testDevmodeIsNotStrict() {
        let devmode = SnapLabel(label: "snap.hello-world.sh (complain)\n")
        XCTAssertEqual(devmode?.snap, "hello-world")
        XCTAssertEqual(devmode?.isStrict, false)
    }

    func testOtherLabelsAreNoSnap() {
        for label in ["unconfined\n", "/usr/bin/man (enforce)\n", "snap-update-ns.firefox (enforce)\n",
                      "snap.firefox (enforce)", "snap.firefox.firefox", "snap.firefox.firefox (sideways)",
                      "snap.Firefox.firefox (enforce)", "snap.-x.app (enforce)", "snap.a--b.app (enforce)",
                      "snap.123.app (enforce)", "snap.x_TOOLONGKEY1.app (enforce)", "snap.x.-app (enforce)",
                      "snap.x.hook.a.b (enforce)", "snap.x.app.extra (enforce)", "snap.x.app(enforce)", ""] {
            XCTAssertNil(SnapLabel(label: label), label)
        }
    }
}
