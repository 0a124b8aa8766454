import CAgentProcess
import Foundation
import XCTest

/// `aa_process_release_read_only_pages` on this test process: the code pages leave the resident set, nothing written is
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

        let advised = aa_process_release_read_only_pages()
        let after = try residentKiB()

        XCTAssertGreaterThan(advised, 0, "no executable file mapping was found")
        XCTAssertLessThan(after, before, "file-backed resident memory did not shrink (\(before) -> \(after) kB)")
        XCTAssertEqual(CodePageReleaseTests.written.count, 100_000)
        XCTAssertEqual(CodePageReleaseTests.written[99_999], 99_999 &* 31, "a written global changed")
        XCTAssertTrue((0..<heap.count).allSatisfy { heap[$0] == UInt8(truncatingIfNeeded: $0 &* 7) }, "heap changed")
        // The code runs on: Foundation, the runtime and this test all fault their pages back in.
        XCTAssertEqual(try JSONDecoder().decode([Int].self, from: Data("[1,2,3]".utf8)), [1, 2, 3])
    }

    /// A private mapping of a temporary file, 64 pages of a known pattern, read (so resident) before it is returned.
    func mappedFile(writable: Bool) throws -> (UnsafeMutableRawPointer, Int) {
        let size = 64 * 4096
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("release-\(UUID().uuidString)").path
        try Data((0..<size).map { UInt8(truncatingIfNeeded: $0 &* 13) }).write(to: URL(fileURLWithPath: path))
        defer { unlink(path) }
        let fd = open(path, O_RDONLY)
        XCTAssertGreaterThanOrEqual(fd, 0)
        defer { close(fd) }
        let prot = writable ? PROT_READ | PROT_WRITE : PROT_READ
        let map = try XCTUnwrap(mmap(nil, size, prot, MAP_PRIVATE, fd, 0))
        XCTAssertNotEqual(map, MAP_FAILED)
        var sum = 0
        for page in stride(from: 0, to: size, by: 4096) { sum &+= Int(map.load(fromByteOffset: page, as: UInt8.self)) }
        XCTAssertGreaterThanOrEqual(sum, 0)
        return (map, size)
    }

    /// The resident kB of the mapping that starts at `address`, from /proc/self/smaps.
    func residentKiB(ofMappingAt address: UnsafeMutableRawPointer) throws -> Int {
        let start = String(UInt(bitPattern: address), radix: 16)
        // Read to the end: procfs files report size 0, and a one-shot read of them stops after the first chunk.
        let handle = try XCTUnwrap(FileHandle(forReadingAtPath: "/proc/self/smaps"))
        defer { try? handle.close() }
        let smaps = String(decoding: try XCTUnwrap(try handle.readToEnd()), as: UTF8.self).split(separator: "\n")
        let header = try XCTUnwrap(smaps.firstIndex { $0.hasPrefix("\(start)-") }, "no mapping at \(start)")
        let rss = try XCTUnwrap(smaps[(header + 1)...].first { $0.hasPrefix("Rss:") })
        return try XCTUnwrap(Int(rss.split(separator: " ", omittingEmptySubsequences: true)[1]))
    }

    func testReadOnlyDataMappingsAreReleasedAndReadTheSameAfterwards() throws {
        let (map, size) = try mappedFile(writable: false)
        defer { munmap(map, size) }
        XCTAssertEqual(try residentKiB(ofMappingAt: map), size / 1024)

        _ = aa_process_release_read_only_pages()

        XCTAssertEqual(try residentKiB(ofMappingAt: map), 0, "a read-only file mapping stayed resident")
        let bytes = map.assumingMemoryBound(to: UInt8.self)
        XCTAssertTrue((0..<size).allSatisfy { bytes[$0] == UInt8(truncatingIfNeeded: $0 &* 13) }, "contents changed")
    }

    /// Read-only now, but written before (as the loader does with relocations before it makes them read-only): the
    /// written page exists only in memory, so the mapping must be left alone.
    func testAReadOnlyMappingWithAWrittenPageIsLeftAlone() throws {
        let (map, size) = try mappedFile(writable: true)
        defer { munmap(map, size) }
        map.storeBytes(of: 0xA5, toByteOffset: 5 * 4096 + 7, as: UInt8.self)
        XCTAssertEqual(mprotect(map, size, PROT_READ), 0)

        _ = aa_process_release_read_only_pages()

        XCTAssertEqual(map.load(fromByteOffset: 5 * 4096 + 7, as: UInt8.self), 0xA5, "a written page was dropped")
        XCTAssertEqual(try residentKiB(ofMappingAt: map), size / 1024, "part of a written mapping was released")
    }
}
