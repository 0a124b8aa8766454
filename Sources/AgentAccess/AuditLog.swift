import AgentIPC
import FoundationEssentials
import Synchronization
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
    private let lock = Mutex(())
    private var ring: [Record] = []
    /// Index of the oldest record once the ring is full.
    private var head = 0
    /// The next record's sequence number: the cursor of paged `audit` replies (``page(account:since:before:)``).
    private var nextSeq = 0

    /// An ``AuditEntry`` as the ring keeps it: the caller is shared with the other records of the same caller (a
    /// cached-token hit on the socket appends one of these per token handed out).
    private struct Record {
        let seq: Int
        let time: Int
        let account: String
        let outcome: String
        let reason: String
        let scopes: [String]?
        let resource: String?
        let proofFor: String?
        let caller: AuditedCaller

        var entry: AuditEntry {
            AuditEntry(time: time, account: account, outcome: outcome, reason: reason, scopes: scopes,
                       resource: resource, proofFor: proofFor, caller: caller.value)
        }
    }

    public init(capacity: Int = 1000, logger: Logger) {
        self.capacity = max(1, capacity)
        self.logger = logger
        ring.reserveCapacity(self.capacity)
    }

    /// Appends a record and logs it: grants at info, refusals and withdrawn requests at notice, with the identity as
    /// metadata.
    public func append(_ entry: AuditEntry) {
        append(time: entry.time, account: entry.account, outcome: entry.outcome, reason: entry.reason,
               scopes: entry.scopes, resource: entry.resource, proofFor: entry.proofFor, caller: AuditedCaller(entry.caller))
    }

    /// ``append(_:)`` with the caller as ``Caller/audited`` made it.
    func append(time: Int, account: String, outcome: String, reason: String, scopes: [String]?, resource: String?,
                proofFor: String? = nil, caller: AuditedCaller) {
        lock.withLock { _ in
            let record = Record(seq: nextSeq, time: time, account: account, outcome: outcome, reason: reason,
                                scopes: scopes, resource: resource, proofFor: proofFor, caller: caller)
            nextSeq += 1
            if ring.count < capacity {
                ring.append(record)
            } else {
                ring[head] = record
                head = (head + 1) % capacity
            }
        }
        // Grants are logged at info: under the default notice level the metadata below would be built per cached
        // token handed out and then dropped.
        let granted = outcome == AuditEntry.granted
        guard logger.logLevel <= (granted ? .info : .notice) else { return }
        let who = caller.value
        // Every name a caller chose is logged as shown to people (WireCaller.shown): no line breaks or bidi controls
        // that would forge rows in a plain-text log.
        func shown(_ text: String) -> Logger.MetadataValue { "\(WireCaller.shown(text))" }
        var meta: Logger.Metadata = [
            "audit": "\(outcome)", "account": shown(account), "reason": "\(reason)",
            "peer_pid": "\(who.pid)", "via": shown(who.via), "peer_kind": shown(who.kind),
        ]
        if let exe = who.exe { meta["peer_exe"] = shown(exe) }
        if who.exeDeleted == true { meta["peer_exe_deleted"] = "true" }
        // The relay's executables, nearest to the program first (PEER_RELAYED_BY in the journal).
        if let relays = who.relayedBy { meta["peer_relayed_by"] = shown(relays.joined(separator: " ")) }
        if let unit = who.unit { meta["peer_unit"] = shown(unit) }
        if let app = who.flatpakApp { meta["peer_flatpak_app"] = shown(app) }
        if let instance = who.flatpakInstance { meta["peer_flatpak_instance"] = shown(instance) }
        if let holes = who.notContained { meta["peer_not_contained"] = shown(holes.joined(separator: " ")) }
        if let why = who.unidentified { meta["peer_unidentified"] = shown(why) }
        if let key = who.hostKey { meta["peer_host_key"] = shown(key) }
        if let alias = who.hostAlias { meta["peer_host_alias"] = shown(alias) }
        if let program = who.remoteProgram { meta["peer_remote_program"] = shown(program) }
        if let scopes { meta["scopes"] = shown(scopes.joined(separator: " ")) }
        if let resource { meta["resource"] = shown(resource) }
        if let proofFor { meta["dpop_proof_for"] = "\(proofFor)" }
        if granted {
            logger.info("token granted", metadata: meta)
        } else if outcome == AuditEntry.withdrawn {
            logger.notice("token request withdrawn", metadata: meta)
        } else {
            logger.notice("token refused", metadata: meta)
        }
    }

    /// The records, oldest first, optionally only one account's and those at or after `since` (Unix time).
    public func entries(account: String? = nil, since: Int? = nil) -> [AuditEntry] {
        matching(account: account, since: since, before: nil).map(\.entry)
    }

    /// One `audit` reply: the newest matching records older than the cursor `before` whose encodings add up to at
    /// most ``AuditResult/pageBytes`` (so the reply line stays under ``WireProtocol/maxMessageBytes`` whatever the
    /// ring holds), oldest first, with ``AuditResult/next`` when older matching records remain. A record too long for
    /// a page on its own is sent clipped. The cursor is a sequence number, so records appended between two pages do
    /// not shift the pages before them.
    public func page(account: String? = nil, since: Int? = nil, before: Int? = nil) -> AuditResult {
        let records = matching(account: account, since: since, before: before)
        var page: [AuditEntry] = []
        var bytes = 0
        for record in records.reversed() {
            var entry = record.entry
            var size = (try? MiniJSONEncoder.encode(entry).count) ?? Int.max  // as the reply line is written
            if size > AuditResult.pageBytes {
                entry = AuditResult.clipped(entry)
                size = (try? MiniJSONEncoder.encode(entry).count) ?? Int.max
            }
            // +1: the comma between records.
            guard bytes + size + 1 <= AuditResult.pageBytes else {
                return AuditResult(entries: page.reversed(), capacity: capacity, next: page.isEmpty ? nil : record.seq + 1)
            }
            bytes += size + 1
            page.append(entry)
        }
        return AuditResult(entries: page.reversed(), capacity: capacity)
    }

    private func matching(account: String?, since: Int?, before: Int?) -> [Record] {
        let all = lock.withLock { _ in Array(ring[head...] + ring[..<head]) }
        return all.filter { record in
            (account == nil || record.account == account) && (since == nil || record.time >= since!)
                && (before == nil || record.seq < before!)
        }
    }
}
