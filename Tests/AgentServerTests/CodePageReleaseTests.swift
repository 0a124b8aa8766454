import CAgentProcess
import Foundation
import XCTest

/// `aa_process_release_code_pages` on this test process: the code pages leave the resident set, nothing written is
/// lost, and the code keeps running (its pages are mapped again on use).
final class CodePageReleaseTests: XCTestCase {
    nonisolated(unsafe) static var written = [Int](repeating: 0, count: 1)

    func residentKiB() throws -> Int {
        let status = try String(contentsOfFile: "/proc/self/status", encoding: .utf8)
        let line = try XCTUnwrap(status.split(separator: "\n").first { $0.hasPrefix("RssFile:") })
        return try XCTUnwrap(Int(line.split(separator: " ", omittingEmptySubsequences: true)[1]))
    }

    func testCodePagesLeaveTheResidentSetAndWrittenMemoryStays() throws {
        CodePageReleaseTests.written = (0..<100_000).map { $0 &* 31 }
        let heap = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 16)
        defer { heap.deallocate() }
        for i in 0..<heap.count { heap[i] = UInt8(truncatingIfNeeded: i &* 7) }
        let before = try residentKiB()

        let advised = aa_process_release_code_pages()
        let after = try residentKiB()

        XCTAssertGreaterThan(advised, 0, "no executable file mapping was found")
        XCTAssertLessThan(after, before, "file-backed resident memory did not shrink (\(before) -> \(after) kB)")
        XCTAssertEqual(CodePageReleaseTests.written.count, 100_000)
        XCTAssertEqual(CodePageReleaseTests.written[99_999], 99_999 &* 31, "a written global changed")
        XCTAssertTrue((0..<heap.count).allSatisfy { heap[$0] == UInt8(truncatingIfNeeded: $0 &* 7) }, "heap changed")
        // The code runs on: Foundation, the runtime and this test all fault their pages back in.
        XCTAssertEqual(try JSONDecoder().decode([Int].self, from: Data("[1,2,3]".utf8)), [1, 2, 3])
    }
}
