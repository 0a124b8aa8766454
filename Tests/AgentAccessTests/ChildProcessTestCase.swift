import Foundation
import XCTest

/// A test case whose callers are real child processes: a scratch directory per test, and every child killed and
/// reaped afterwards.
class ChildProcessTestCase: XCTestCase {
    var children: [Process] = []
    var directory: URL!

    override func setUpWithError() throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("aa-children-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    }

    override func tearDown() {
        // Not waitUntilExit(): from an async test's tear-down it waits for the child's own end (the run loop that
        // would notice the SIGTERM is not serviced there).
        for child in children where child.isRunning { kill(child.processIdentifier, SIGKILL) }
        for child in children {
            for _ in 0..<500 where child.isRunning { usleep(10_000) }
        }
        try? FileManager.default.removeItem(at: directory)
    }

    /// Starts `path` with `arguments` as a child that tear-down ends.
    func spawn(_ path: String, _ arguments: [String]) throws -> Process {
        let child = Process()
        child.executableURL = URL(fileURLWithPath: path)
        child.arguments = arguments
        try child.run()
        children.append(child)
        return child
    }
}
