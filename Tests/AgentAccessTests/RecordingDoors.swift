import AgentIPC
@testable import AgentAccess
import Synchronization

/// A front end that serves no socket and records what the agent asked of it (``DoorListeners``), for the tests of
/// forward sessions and grants: `listen NAME PATH`, `close NAME`, `watch PID`, NAME being a session's id or
/// `grant:NAME`.
final class RecordingDoors: DoorListeners {
    let events = Mutex<[String]>([])

    func listen(path: String, door: Door) throws(WireError) { events.withLock { $0.append("listen \(Self.name(door)) \(path)") } }
    func close(door: Door) { events.withLock { $0.append("close \(Self.name(door))") } }
    func watchExit(of process: ProcessPin, _ exited: @escaping @Sendable () -> Void) {
        events.withLock { $0.append("watch \(process.pid)") }
    }

    static func name(_ door: Door) -> String {
        switch door {
        case .forward(let id): return id
        case .grant(let name): return "grant:\(name)"
        }
    }
}
