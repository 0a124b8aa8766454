import CSystemd
import Logging
import Glibc

/// A swift-log handler that writes structured entries to the systemd journal (`sd_journal_sendv`): `MESSAGE`,
/// `PRIORITY`, `SYSLOG_IDENTIFIER`, and every metadata key as an uppercase field (`account` → `ACCOUNT`,
/// `peer_pid` → `PEER_PID`), so `journalctl --user -u auth-agent ACCOUNT=work` works. Callers must never put
/// secrets in messages or metadata; the agent passes only names, codes and counts.
public struct JournalLogHandler: LogHandler {
    public var metadata: Logger.Metadata = [:]
    public var logLevel: Logger.Level
    let identifier: String

    public init(identifier: String, level: Logger.Level = .info) {
        self.identifier = identifier
        self.logLevel = level
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(event: LogEvent) {
        var fields = [
            "MESSAGE=\(event.message)",
            "PRIORITY=\(JournalLogHandler.priority(event.level))",
            "SYSLOG_IDENTIFIER=\(identifier)",
            "CODE_MODULE=\(event.source)",
        ]
        let merged = metadata.merging(event.metadata ?? [:]) { _, new in new }
        for key in merged.keys.sorted() {
            guard let name = JournalLogHandler.fieldName(key), let value = merged[key] else { continue }
            fields.append("\(name)=\(value)")
        }
        JournalLogHandler.send(fields)
    }

    /// syslog priorities (sd-daemon.h): journald has no "trace"; both trace and debug are 7.
    static func priority(_ level: Logger.Level) -> Int {
        switch level {
        case .trace, .debug: return 7
        case .info: return 6
        case .notice: return 5
        case .warning: return 4
        case .error: return 3
        case .critical: return 2
        }
    }

    /// Journal field names are `[A-Z0-9_]`, not starting with `_` (reserved for trusted fields) or a digit, and
    /// at most 64 characters. Keys that cannot be made valid are dropped rather than mangled into something else.
    static func fieldName(_ key: String) -> String? {
        var name = String(key.uppercased().map { ($0.isASCII && ($0.isLetter || $0.isNumber)) ? $0 : "_" })
        while name.first == "_" || name.first?.isNumber == true { name.removeFirst() }
        guard !name.isEmpty else { return nil }
        if name == "OP" { name = "OPERATION" }
        let reserved: Set<String> = ["MESSAGE", "PRIORITY", "SYSLOG_IDENTIFIER", "CODE_MODULE", "CODE_FILE", "CODE_LINE", "CODE_FUNC"]
        if reserved.contains(name) { name = "META_" + name }
        return String(name.prefix(64))
    }

    static func send(_ fields: [String]) {
        let copies = fields.map { strdup($0) }
        defer { copies.forEach { free($0) } }
        var vectors = copies.map { iovec(iov_base: UnsafeMutableRawPointer($0), iov_len: $0.map { strlen($0) } ?? 0) }
        _ = vectors.withUnsafeMutableBufferPointer { sd_journal_sendv($0.baseAddress, Int32($0.count)) }
    }
}
