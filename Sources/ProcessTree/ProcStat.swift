/// The fields of `/proc/PID/stat` that are read, from one pass over the file's text. The command name (field 2) may
/// hold spaces and parentheses, so fields are counted after its last ')'. Pure: the tests feed it recorded texts.
public struct ProcStat: Equatable, Sendable {
    /// Field 4, the parent's pid (0 when the parent is outside the reader's pid namespace).
    public var parent: Int32
    /// Field 7, the controlling terminal's device number (0: none).
    public var controllingTerminal: Int64
    /// Field 22, the process start time in clock ticks since boot: with the pid it names one process for the life of
    /// the system (a recycled pid has a later start time).
    public var startTime: UInt64

    /// Nil when the text does not hold the three fields as numbers.
    public init?(text: String) {
        var text = text
        // The file's UTF-8 bytes in place: this runs once or twice per socket connection, and reading the text as
        // `Character`s was most of the accept loop's instructions per new connection.
        guard let fields = text.withUTF8({ ProcStat.fields(of: $0) }) else { return nil }
        (parent, controllingTerminal, startTime) = fields
    }

    /// Process `pid`'s stat, read now; nil when it is gone (or unreadable).
    public static func read(pid: Int32) -> ProcStat? {
        guard pid > 0 else { return nil }
        return ProcFile.text("/proc/\(pid)/stat").flatMap(ProcStat.init(text:))
    }

    private static func fields(of bytes: UnsafeBufferPointer<UInt8>) -> (Int32, Int64, UInt64)? {
        guard let close = bytes.lastIndex(of: UInt8(ascii: ")")) else { return nil }
        var parent: Int32?, terminal: Int64?
        var index = close + 1
        var current = 2
        while index < bytes.count {
            while index < bytes.count, bytes[index] == UInt8(ascii: " ") { index += 1 }
            guard index < bytes.count else { return nil }
            let start = index
            while index < bytes.count, bytes[index] != UInt8(ascii: " ") { index += 1 }
            current += 1
            let field = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self)
            switch current {
            case 4: parent = Int32(field)
            case 7: terminal = Int64(field)
            case 22:
                guard let parent, let terminal, let startTime = UInt64(field) else { return nil }
                return (parent, terminal, startTime)
            default: continue
            }
        }
        return nil
    }
}
