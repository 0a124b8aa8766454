import AgentIPC
import Foundation
import Logging

/// The audit trail: one record per token handed out, per request refused and per request withdrawn while it waited
/// for a consent answer, to the log (the journal, as structured fields) and into a bounded in-memory ring for
/// `authctl audit`. Never holds a token: records are built from the account, the scopes/resource asked for, the
/// caller's kernel-derived identity and the outcome. Lock-protected and synchronous, so the socket's event loop
/// can append without an actor hop.
public final class AuditLog: @unchecked Sendable {
    /// Records kept in memory; older ones are only in the journal.
    public let capacity: Int
    private let logger: Logger
    private let lock = NSLock()
    private var ring: [AuditEntry] = []
    /// Index of the oldest record once the ring is full.
    private var head = 0

    public init(capacity: Int = 1000, logger: Logger) {
        self.capacity = max(1, capacity)
        self.logger = logger
        ring.reserveCapacity(self.capacity)
    }

    /// Appends a record and logs it: grants at info, refusals and withdrawn requests at notice, with the identity as
    /// metadata.
    public func append(_ entry: AuditEntry) {
        lock.withLock {
            if ring.count < capacity {
                ring.append(entry)
            } else {
                ring[head] = entry
                head = (head + 1) % capacity
            }
        }
        // Grants are logged at info: under the default notice level the metadata below would be built per cached
        // token handed out and then dropped.
        let granted = entry.outcome == AuditEntry.granted
        guard logger.logLevel <= (granted ? .info : .notice) else { return }
        var meta: Logger.Metadata = [
            "audit": "\(entry.outcome)", "account": "\(entry.account)", "reason": "\(entry.reason)",
            "peer_pid": "\(entry.caller.pid)", "via": "\(entry.caller.via)",
        ]
        if let exe = entry.caller.exe { meta["peer_exe"] = "\(exe)" }
        if entry.caller.exeDeleted == true { meta["peer_exe_deleted"] = "true" }
        if let unit = entry.caller.unit { meta["peer_unit"] = "\(unit)" }
        if let app = entry.caller.flatpakApp { meta["peer_flatpak_app"] = "\(app)" }
        if let scopes = entry.scopes { meta["scopes"] = "\(scopes.joined(separator: " "))" }
        if let resource = entry.resource { meta["resource"] = "\(resource)" }
        if granted {
            logger.info("token granted", metadata: meta)
        } else if entry.outcome == AuditEntry.withdrawn {
            logger.notice("token request withdrawn", metadata: meta)
        } else {
            logger.notice("token refused", metadata: meta)
        }
    }

    /// The records, oldest first, optionally only one account's and those at or after `since` (Unix time).
    public func entries(account: String? = nil, since: Int? = nil) -> [AuditEntry] {
        let all = lock.withLock { Array(ring[head...] + ring[..<head]) }
        return all.filter { entry in
            (account == nil || entry.account == account) && (since == nil || entry.time >= since!)
        }
    }
}
