import Synchronization

/// The open client connections: so shutdown can reach them, and so their number stays bounded (SECURITY.md 22).
/// When a new connection would exceed `limit`, the connection that has been idle longest (no request in flight)
/// is closed to make room; only when every connection is busy is the new one refused. Idle clients, however many,
/// therefore cannot keep a real client from being served, and the agent's open files stay below its limit.
final class ConnectionRegistry: @unchecked Sendable {
    /// The connection's owner (its ``AcceptLoop``) and its descriptor there.
    struct Holder {
        let owner: any ConnectionOwner
        let fd: Int32

        func close(_ id: Int) { owner.close(fd, registration: id) }
        func closeInput(_ id: Int) { owner.closeInput(fd, registration: id) }
    }

    private struct Entry {
        var holder: Holder
        var busy = 0
        /// A logical clock: the order of the last request start or end.
        var lastActive: UInt64
    }

    let limit: Int
    private let lock = Mutex(())
    private var entries: [Int: Entry] = [:]
    private var next = 0
    private var tick: UInt64 = 0
    private var closing = false

    init(limit: Int) { self.limit = limit }

    var count: Int { lock.withLock { _ in entries.count } }

    /// Registers a connection; nil when the registry is full of busy connections (the caller closes it).
    func add(_ holder: Holder) -> Int? {
        let (id, closing, evicted) = lock.withLock { _ -> (Int?, Bool, (Int, Holder)?) in
            var evicted: (Int, Holder)?
            if entries.count >= limit {
                guard let victim = entries.filter({ $0.value.busy == 0 }).min(by: { $0.value.lastActive < $1.value.lastActive })
                else { return (nil, self.closing, nil) }
                evicted = (victim.key, victim.value.holder)
                entries.removeValue(forKey: victim.key)
            }
            next += 1
            tick += 1
            entries[next] = Entry(holder: holder, lastActive: tick)
            return (next, self.closing, evicted)
        }
        if let (victim, holder) = evicted { holder.close(victim) }
        if let id, closing { holder.closeInput(id) }
        return id
    }

    func remove(_ id: Int) { lock.withLock { _ in _ = entries.removeValue(forKey: id) } }

    /// A request started on the connection: it is not idle until the matching ``end(_:)``.
    func begin(_ id: Int) { update(id) { $0.busy += 1 } }
    func end(_ id: Int) { update(id) { $0.busy -= 1 } }
    /// A request was answered at once (the fast path): the connection moves to the back of the eviction order.
    func touch(_ id: Int) { update(id) { _ in } }

    private func update(_ id: Int, _ change: (inout Entry) -> Void) {
        lock.withLock { _ in
            guard var entry = entries[id] else { return }
            change(&entry)
            tick += 1
            entry.lastActive = tick
            entries[id] = entry
        }
    }

    func closeInputOfAll() {
        let all = lock.withLock { _ -> [(Int, Holder)] in
            closing = true
            return entries.map { ($0.key, $0.value.holder) }
        }
        for (id, holder) in all { holder.closeInput(id) }
    }
}

/// Who owns registered connections: the registry closes through it (eviction, shutdown), from any thread.
protocol ConnectionOwner: AnyObject, Sendable {
    /// Closes connection `registration` on `fd` now; ignored once it is closed.
    func close(_ fd: Int32, registration: Int)
    /// Reads nothing more from it: what the client sent is still answered, then it closes.
    func closeInput(_ fd: Int32, registration: Int)
}
