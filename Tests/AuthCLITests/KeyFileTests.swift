import ConfigFile
import XCTest

/// The one key-file reading the agent (a caller's `/.flatpak-info`) and authctl (a sandbox's missing permission) share.
final class KeyFileTests: XCTestCase {
    func testGroupsAndEntriesReadAsGLibReadsThem() {
        let text = "# written by flatpak\n[Application]\nname = org.example.App\n\n[Context]\r\nfilesystems=a;b;\r\n  [Session Bus Policy]  \norg.example.*=talk\nnot an entry\n"
        XCTAssertEqual(KeyFile.lines(text), [
            .group("Application"), .entry(key: "name", value: "org.example.App"),
            .group("Context"), .entry(key: "filesystems", value: "a;b;"),
            .group("Session Bus Policy"), .entry(key: "org.example.*", value: "talk"),
        ])
        XCTAssertEqual(KeyFile.lines("[A]\nk=v=w\nempty=\n"), [.group("A"), .entry(key: "k", value: "v=w"), .entry(key: "empty", value: "")])
    }

    func testAPrefixLeavesOutItsCutLastLine() {
        XCTAssertEqual(KeyFile.lines("[Context]\nfilesystems=home;xdg-run/au", complete: false), [.group("Context")])
        XCTAssertEqual(KeyFile.lines("[Context]\nfilesystems=home;xdg-run/au"),
                       [.group("Context"), .entry(key: "filesystems", value: "home;xdg-run/au")])
    }

    func testAnUnclosedHeaderEndsTheGroupBeforeIt() {
        // Entries after a broken header belong to no group a reader asks for, never to the group before it.
        XCTAssertEqual(KeyFile.lines("[Context]\n[Environment\nfilesystems=host;\n"),
                       [.group("Context"), .group("[Environment"), .entry(key: "filesystems", value: "host;")])
    }

    func testListsSplitOnlyAtUnescapedSemicolons() {
        XCTAssertEqual(KeyFile.list("a\\;b;c;;"), ["a\\;b", "c"])
        XCTAssertEqual(KeyFile.list("host"), ["host"], "a list without the final ';'")
        XCTAssertEqual(KeyFile.list(""), [])
    }
}
