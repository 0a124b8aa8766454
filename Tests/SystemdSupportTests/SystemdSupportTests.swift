import Foundation
import SystemdSupport
import XCTest

/// sd_notify and sd_listen_fds against the real libsystemd, with a notify socket the test owns. These tests
/// change process environment variables and restore them; XCTest runs them one at a time.
final class SystemdSupportTests: XCTestCase {
    private var saved: [String: String?] = [:]

    override func setUp() {
        for name in ["NOTIFY_SOCKET", "LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES", "JOURNAL_STREAM"] {
            saved[name] = ProcessInfo.processInfo.environment[name]
            unsetenv(name)
        }
    }

    override func tearDown() {
        for (name, value) in saved {
            if let value { setenv(name, value, 1) } else { unsetenv(name) }
        }
    }

    func testNotifyReachesTheNotifySocket() throws {
        let socket = try NotifySocket()
        setenv("NOTIFY_SOCKET", socket.path, 1)

        XCTAssertTrue(SystemdNotifier.notify("READY=1"))
        XCTAssertEqual(try socket.receive(), "READY=1")
        XCTAssertTrue(SystemdNotifier.ready(status: "serving"))
        XCTAssertEqual(try socket.receive(), "READY=1\nSTATUS=serving")
        XCTAssertTrue(SystemdNotifier.status("two\nlines"))
        XCTAssertEqual(try socket.receive(), "STATUS=two lines", "a newline would start a new assignment")
        XCTAssertTrue(SystemdNotifier.watchdog())
        XCTAssertEqual(try socket.receive(), "WATCHDOG=1")
        XCTAssertTrue(SystemdNotifier.stopping())
        XCTAssertEqual(try socket.receive(), "STOPPING=1")
        // The variable stays set (sd_notify(0, ...)), so later notifications still arrive.
        XCTAssertNotNil(ProcessInfo.processInfo.environment["NOTIFY_SOCKET"])
    }

    func testNotifyWithoutNotifySocketIsANoOp() {
        XCTAssertFalse(SystemdNotifier.notify("READY=1"))
        XCTAssertFalse(SystemdNotifier.ready())
        XCTAssertFalse(SystemdNotifier.watchdog())
    }

    func testWatchdogIntervalComesFromWatchdogUsec() {
        XCTAssertNil(SystemdNotifier.watchdogInterval())
        setenv("WATCHDOG_USEC", "30000000", 1)
        setenv("WATCHDOG_PID", "\(getpid())", 1)
        defer { unsetenv("WATCHDOG_USEC"); unsetenv("WATCHDOG_PID") }
        XCTAssertEqual(SystemdNotifier.watchdogInterval(), .seconds(30))
    }

    func testListenFDsWithoutActivationIsEmpty() throws {
        XCTAssertEqual(try ListenFDs.take(), [])
    }

    func testListenFDsForAnotherProcessAreIgnoredAndUnset() throws {
        setenv("LISTEN_PID", "\(getpid() + 1)", 1)
        setenv("LISTEN_FDS", "1", 1)
        XCTAssertEqual(try ListenFDs.take(), [])
        XCTAssertNil(ProcessInfo.processInfo.environment["LISTEN_FDS"])
        XCTAssertNil(ProcessInfo.processInfo.environment["LISTEN_PID"])
    }

    func testJournalStreamMatchesOnlyStderrsDeviceAndInode() throws {
        XCTAssertFalse(JournalStream.isStderrJournal())
        var info = stat()
        XCTAssertEqual(fstat(STDERR_FILENO, &info), 0)
        setenv("JOURNAL_STREAM", "\(info.st_dev):\(info.st_ino)", 1)
        XCTAssertTrue(JournalStream.isStderrJournal())
        setenv("JOURNAL_STREAM", "\(info.st_dev):\(info.st_ino + 1)", 1)
        XCTAssertFalse(JournalStream.isStderrJournal())
        setenv("JOURNAL_STREAM", "garbage", 1)
        XCTAssertFalse(JournalStream.isStderrJournal())
    }
}

/// A datagram Unix socket bound to a fresh path, as systemd's notify socket is.
private final class NotifySocket {
    let path: String
    private let directory: String
    private let fd: Int32

    init() throws {
        var template = Array("\(NSTemporaryDirectory())/notify.XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { throw POSIXError(.EIO) }
        directory = String(cString: made)
        path = directory + "/notify.sock"
        fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue), 0)
        guard fd >= 0 else { throw POSIXError(.EIO) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { buffer in
            buffer.copyBytes(from: path.utf8.prefix(buffer.count - 1))
        }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        guard bound == 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
        // Never hang the test run if a datagram does not come.
        var timeout = timeval(tv_sec: 5, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    }

    deinit {
        close(fd)
        unlink(path)
        rmdir(directory)
    }

    func receive() throws -> String {
        var buffer = [UInt8](repeating: 0, count: 4096)
        let count = recv(fd, &buffer, buffer.count, 0)
        guard count >= 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
        return String(decoding: buffer[..<count], as: UTF8.self)
    }
}
