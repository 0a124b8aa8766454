import Foundation
import NIOCore

/// The open client connections: so shutdown can reach them, and so their number stays bounded (SECURITY.md 22).
/// When a new connection would exceed `limit`, the connection that has been idle longest (no request in flight)
/// is closed to make room; only when every connection is busy is the new one refused. Idle clients, however many,
/// therefore cannot keep a real client from being served, and the agent's open files stay below its limit.
final class ConnectionRegistry: @unchecked Sendable {
    private struct Entry {
        let channel: any Channel
        var busy = 0
        /// A logical clock: the order of the last request start or end.
        var lastActive: UInt64
    }

    let limit: Int
    private let lock = NSLock()
    private var entries: [Int: Entry] = [:]
    private var next = 0
    private var tick: UInt64 = 0
    private var closing = false

    init(limit: Int) { self.limit = limit }

    var count: Int { lock.withLock { entries.count } }

    /// Registers a connection; nil when the registry is full of busy connections (the caller closes it).
    func add(_ channel: any Channel) -> Int? {
        let (id, closing, evicted) = lock.withLock { () -> (Int?, Bool, (any Channel)?) in
            var evicted: (any Channel)?
            if entries.count >= limit {
                guard let victim = entries.filter({ $0.value.busy == 0 }).min(by: { $0.value.lastActive < $1.value.lastActive })
                else { return (nil, self.closing, nil) }
                evicted = victim.value.channel
                entries.removeValue(forKey: victim.key)
            }
            next += 1
            tick += 1
            entries[next] = Entry(channel: channel, lastActive: tick)
            return (next, self.closing, evicted)
        }
        evicted?.close(promise: nil)
        if id != nil, closing { ConnectionRegistry.closeInput(channel) }
        return id
    }

    func remove(_ id: Int) { lock.withLock { _ = entries.removeValue(forKey: id) } }

    /// A request started on the connection: it is not idle until the matching ``end(_:)``.
    func begin(_ id: Int) { update(id) { $0.busy += 1 } }
    func end(_ id: Int) { update(id) { $0.busy -= 1 } }
    /// A request was answered at once (the fast path): the connection moves to the back of the eviction order.
    func touch(_ id: Int) { update(id) { _ in } }

    private func update(_ id: Int, _ change: (inout Entry) -> Void) {
        lock.withLock {
            guard var entry = entries[id] else { return }
            change(&entry)
            tick += 1
            entry.lastActive = tick
            entries[id] = entry
        }
    }

    func closeInputOfAll() {
        let all = lock.withLock { () -> [any Channel] in
            closing = true
            return entries.values.map(\.channel)
        }
        for channel in all { ConnectionRegistry.closeInput(channel) }
    }

    static func closeInput(_ channel: any Channel) {
        channel.close(mode: .input).whenFailure { _ in channel.close(promise: nil) }
    }
}
