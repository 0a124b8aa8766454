import Foundation
import XCTest

/// The release link refuses full Foundation, CoreFoundation, FoundationInternationalization and ICU (Package.swift
/// `essentialsOnly`: their archives are replaced by an empty linker script, for the installed size). The debug build
/// links them as shared libraries and would not notice a use of them; this test does, so a newcomer's `swift test`
/// fails where the release link would: no symbol the debug `auth-agent` or `authctl` takes from a shared library may be
/// one that only those libraries define.
final class EssentialsOnlyTests: XCTestCase {
    func testTheShippedBinariesTakeNothingFromFullFoundation() throws {
        // The libraries this test process loaded (XCTest needs full Foundation) are the toolchain's.
        // (/proc files say they are empty: read to the end, not by their size.)
        let maps = String(decoding: try XCTUnwrap(FileHandle(forReadingAtPath: "/proc/self/maps")).readDataToEndOfFile(), as: UTF8.self)
        let foundation = try XCTUnwrap(maps.split(separator: "\n").compactMap { $0.split(separator: " ").last }
            .first { $0.hasSuffix("/libFoundation.so") }, "this test process has no libFoundation.so mapped")
        let lib = URL(fileURLWithPath: String(foundation)).deletingLastPathComponent()
        var refused = Set<String>()
        for name in ["libFoundation.so", "libFoundationInternationalization.so", "lib_FoundationICU.so"] {
            refused.formUnion(try symbols(lib.appendingPathComponent(name).path, "--defined-only"))
        }
        refused.subtract(try symbols(lib.appendingPathComponent("libFoundationEssentials.so").path, "--defined-only"))
        // The binaries sit beside the test bundle (`swift build --show-bin-path`).
        let bin = URL(fileURLWithPath: try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe"))
            .deletingLastPathComponent()
        for binary in ["auth-agent", "authctl"] {
            let path = bin.appendingPathComponent(binary).path
            guard FileManager.default.isExecutableFile(atPath: path) else { throw XCTSkip("\(path) is not built (swift build)") }
            let used = try symbols(path, "--undefined-only").intersection(refused).sorted()
            XCTAssertEqual(used, [], "\(binary) uses full Foundation, which the release link refuses (Package.swift essentialsOnly): "
                           + "import FoundationEssentials, not Foundation, and find another way to what these symbols do")
        }
    }

    /// The dynamic symbols of `path` that `nm -D` lists with `filter`.
    private func symbols(_ path: String, _ filter: String) throws -> Set<String> {
        let nm = Process()
        nm.executableURL = URL(fileURLWithPath: "/usr/bin/nm")
        nm.arguments = ["-D", filter, path]
        let output = Pipe()
        nm.standardOutput = output
        try nm.run()
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        nm.waitUntilExit()
        XCTAssertEqual(nm.terminationStatus, 0, "nm -D \(filter) \(path)")
        return Set(text.split(separator: "\n").compactMap { $0.split(separator: " ").last.map(String.init) })
    }
}
