@testable import AgentAccess
import Foundation
import XCTest

/// Issue 46: the consent question shows an app's name as the desktop shows it for the installed app of that id.
final class FlatpakDisplayNameTests: XCTestCase {
    func testTheDesktopEntrysOwnNameIsTakenPrintableAndShort() {
        let text = """
            [Desktop Action new]
            Name=New window

            [Desktop Entry]
            Name[de]=Beispiel
            Name=  Example \u{1B}[31mMail  
            Exec=example
            """
        XCTAssertEqual(FlatpakDisplayName.name(desktopEntry: text), "Example [31mMail")
        XCTAssertNil(FlatpakDisplayName.name(desktopEntry: "[Desktop Entry]\nExec=x\n"))
        XCTAssertNil(FlatpakDisplayName.name(desktopEntry: "[Other]\nName=x\n"))
        XCTAssertEqual(FlatpakDisplayName.name(desktopEntry: "[Desktop Entry]\nName=" + String(repeating: "n", count: 300))?.count, 64)
    }

    func testAUserInstallsExportedDesktopFileIsFoundThroughItsSymlink() throws {
        let data = FileManager.default.temporaryDirectory.appendingPathComponent("aa-data-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: data) }
        let exports = data.appendingPathComponent("flatpak/exports/share/applications")
        let installed = data.appendingPathComponent("flatpak/app/org.example.Mail/current/active/export/share/applications")
        try FileManager.default.createDirectory(at: exports, withIntermediateDirectories: true)
        try FileManager.default.createDirectory(at: installed, withIntermediateDirectories: true)
        try "[Desktop Entry]\nName=Example Mail\n".write(to: installed.appendingPathComponent("org.example.Mail.desktop"),
                                                          atomically: true, encoding: .utf8)
        try FileManager.default.createSymbolicLink(atPath: exports.appendingPathComponent("org.example.Mail.desktop").path,
                                                   withDestinationPath: installed.appendingPathComponent("org.example.Mail.desktop").path)
        XCTAssertEqual(FlatpakDisplayName.lookup("org.example.Mail", dataHome: data.path), "Example Mail")
        XCTAssertNil(FlatpakDisplayName.lookup("org.example.Other", dataHome: data.path))
        // A FIFO in its place is not read (it would block): not a regular file.
        XCTAssertEqual(mkfifo(exports.appendingPathComponent("org.example.Fifo.desktop").path, 0o600), 0)
        XCTAssertNil(FlatpakDisplayName.lookup("org.example.Fifo", dataHome: data.path))
    }
}
