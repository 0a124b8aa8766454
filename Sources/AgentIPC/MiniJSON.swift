/// The socket protocol's strict JSON reader: every request the agent reads (``WireRequest/decode(line:)``) and every
/// reply `authctl` reads (``ReplyReader``, through ``MiniJSONDecoder``), plus the string quoting of authctl's request
/// writer (``WireRequest/line``). Codable's JSON paths cost more at `authctl` start-up (run-time generic metadata
/// and protocol conformance scans) than the whole socket round trip. Reading is all-or-nothing: anything unusual (invalid UTF-8, control characters in
/// strings, non-integer numbers, duplicate keys, an object of more than ``maxMembers`` members, nesting over 16,
/// trailing bytes) gives nil. The protocol has no fractional numbers, so none is read.
enum MiniJSON: Equatable {
    /// No object of the protocol has more than about 30 members. The cap bounds the duplicate-key check, a scan of
    /// the members read so far: a 64 KiB line of thousands of distinct keys would otherwise cost the accept loop,
    /// which reads every request, tens of millions of comparisons.
    static let maxMembers = 128

    case object([(key: String, value: MiniJSON)])
    case array([MiniJSON])
    case string(String)
    case integer(Int)
    case bool(Bool)
    case null

    static func == (a: MiniJSON, b: MiniJSON) -> Bool {
        switch (a, b) {
        case (.object(let x), .object(let y)): return x.count == y.count && zip(x, y).allSatisfy { $0.key == $1.key && $0.value == $1.value }
        case (.array(let x), .array(let y)): return x == y
        case (.string(let x), .string(let y)): return x == y
        case (.integer(let x), .integer(let y)): return x == y
        case (.bool(let x), .bool(let y)): return x == y
        case (.null, .null): return true
        default: return false
        }
    }

    /// The member `key` of an object (nil if absent or not an object).
    subscript(key: String) -> MiniJSON? {
        guard case .object(let members) = self else { return nil }
        return members.first { $0.key == key }?.value
    }

    /// Member `key` as the type asked for: `.some(nil)` when absent or null, `.some(value)` when of that type, nil
    /// when of another type. (Closures, not key paths: authctl reads every reply with these, and a key path is made
    /// from mangled names at its first use.)
    func int(_ key: String) -> Int?? { self[key].map { $0.asInt } ?? .some(nil) }
    func string(_ key: String) -> String?? { self[key].map { $0.asString } ?? .some(nil) }
    func bool(_ key: String) -> Bool?? { self[key].map { $0.asBool } ?? .some(nil) }
    func strings(_ key: String) -> [String]?? { self[key].map { $0.asStrings } ?? .some(nil) }

    /// This value as the type asked for: `.some(nil)` when null, `.some(value)` when of that type, nil when of
    /// another type.
    var asInt: Int?? {
        switch self {
        case .null: return .some(nil)
        case .integer(let value): return value
        default: return nil
        }
    }

    var asString: String?? {
        switch self {
        case .null: return .some(nil)
        case .string(let value): return value
        default: return nil
        }
    }

    var asBool: Bool?? {
        switch self {
        case .null: return .some(nil)
        case .bool(let value): return value
        default: return nil
        }
    }

    var asStrings: [String]?? {
        switch self {
        case .null: return .some(nil)
        case .array(let elements):
            var strings: [String] = []
            for element in elements {
                guard case .string(let value) = element else { return nil }
                strings.append(value)
            }
            return strings
        default: return nil
        }
    }

    static func parse(_ bytes: [UInt8]) -> MiniJSON? {
        var reader = Reader(bytes: bytes)
        guard let value = reader.value(depth: 0) else { return nil }
        reader.skipSpace()
        return reader.index == bytes.count ? value : nil
    }

    private struct Reader {
        let bytes: [UInt8]
        var index = 0

        mutating func skipSpace() {
            while index < bytes.count {
                switch bytes[index] {
                case 0x20, 0x09, 0x0A, 0x0D: index += 1
                default: return
                }
            }
        }

        mutating func literal(_ text: StaticString, _ value: MiniJSON) -> MiniJSON? {
            let count = text.utf8CodeUnitCount
            guard index + count <= bytes.count else { return nil }
            for offset in 0..<count where bytes[index + offset] != text.utf8Start[offset] { return nil }
            index += count
            return value
        }

        mutating func value(depth: Int) -> MiniJSON? {
            skipSpace()
            guard index < bytes.count, depth < 16 else { return nil }
            switch bytes[index] {
            case UInt8(ascii: "{"): return object(depth: depth)
            case UInt8(ascii: "["): return array(depth: depth)
            case UInt8(ascii: "\""): return string().map(MiniJSON.string)
            case UInt8(ascii: "t"): return literal("true", .bool(true))
            case UInt8(ascii: "f"): return literal("false", .bool(false))
            case UInt8(ascii: "n"): return literal("null", .null)
            default: return integer()
            }
        }

        mutating func object(depth: Int) -> MiniJSON? {
            index += 1
            var members: [(key: String, value: MiniJSON)] = []
            skipSpace()
            if index < bytes.count, bytes[index] == UInt8(ascii: "}") { index += 1; return .object(members) }
            while true {
                skipSpace()
                guard index < bytes.count, bytes[index] == UInt8(ascii: "\""), let key = string() else { return nil }
                guard members.count < MiniJSON.maxMembers, !members.contains(where: { $0.key == key }) else { return nil }
                skipSpace()
                guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else { return nil }
                index += 1
                guard let value = value(depth: depth + 1) else { return nil }
                members.append((key, value))
                skipSpace()
                guard index < bytes.count else { return nil }
                index += 1
                if bytes[index - 1] == UInt8(ascii: "}") { return .object(members) }
                guard bytes[index - 1] == UInt8(ascii: ",") else { return nil }
            }
        }

        mutating func array(depth: Int) -> MiniJSON? {
            index += 1
            var elements: [MiniJSON] = []
            skipSpace()
            if index < bytes.count, bytes[index] == UInt8(ascii: "]") { index += 1; return .array(elements) }
            while true {
                guard let element = value(depth: depth + 1) else { return nil }
                elements.append(element)
                skipSpace()
                guard index < bytes.count else { return nil }
                index += 1
                if bytes[index - 1] == UInt8(ascii: "]") { return .array(elements) }
                guard bytes[index - 1] == UInt8(ascii: ",") else { return nil }
            }
        }

        /// Only `-?[0-9]+` that fits an Int (no fraction, no exponent, no leading zero).
        mutating func integer() -> MiniJSON? {
            let start = index
            if index < bytes.count, bytes[index] == UInt8(ascii: "-") { index += 1 }
            let digits = index
            while index < bytes.count, bytes[index] >= UInt8(ascii: "0"), bytes[index] <= UInt8(ascii: "9") { index += 1 }
            guard index > digits, index - digits == 1 || bytes[digits] != UInt8(ascii: "0") else { return nil }
            if index < bytes.count, [UInt8(ascii: "."), UInt8(ascii: "e"), UInt8(ascii: "E")].contains(bytes[index]) { return nil }
            guard let text = Reader.text(bytes[start..<index]), let value = Int(text) else { return nil }
            return .integer(value)
        }

        mutating func string() -> String? {
            index += 1
            // Most strings have no escape: taken whole, without a copy byte by byte.
            var end = index
            while end < bytes.count, bytes[end] >= 0x20, bytes[end] != UInt8(ascii: "\""), bytes[end] != UInt8(ascii: "\\") {
                end += 1
            }
            if end < bytes.count, bytes[end] == UInt8(ascii: "\"") {
                defer { index = end + 1 }
                return Reader.text(bytes[index..<end])
            }
            var out: [UInt8] = Array(bytes[index..<end])
            index = end
            while index < bytes.count {
                let byte = bytes[index]
                index += 1
                switch byte {
                case UInt8(ascii: "\""): return Reader.text(out[...])
                case 0..<0x20: return nil
                case UInt8(ascii: "\\"):
                    guard index < bytes.count else { return nil }
                    let escape = bytes[index]
                    index += 1
                    switch escape {
                    case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): out.append(escape)
                    case UInt8(ascii: "b"): out.append(0x08)
                    case UInt8(ascii: "f"): out.append(0x0C)
                    case UInt8(ascii: "n"): out.append(0x0A)
                    case UInt8(ascii: "r"): out.append(0x0D)
                    case UInt8(ascii: "t"): out.append(0x09)
                    case UInt8(ascii: "u"):
                        guard var scalar = hex4() else { return nil }
                        if (0xD800..<0xDC00).contains(scalar) {
                            guard index + 1 < bytes.count, bytes[index] == UInt8(ascii: "\\"), bytes[index + 1] == UInt8(ascii: "u") else { return nil }
                            index += 2
                            guard let low = hex4(), (0xDC00..<0xE000).contains(low) else { return nil }
                            scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                        }
                        guard let unicode = Unicode.Scalar(scalar) else { return nil }
                        out.append(contentsOf: Array(String(Character(unicode)).utf8))
                    default: return nil
                    }
                default: out.append(byte)
                }
            }
            return nil
        }

        /// `utf8` as a string, nil when it is not valid UTF-8. ASCII, what nearly every request holds, needs no
        /// decoder (the generic one costs more than the rest of a request's parse).
        static func text(_ utf8: ArraySlice<UInt8>) -> String? {
            utf8.allSatisfy { $0 < 0x80 } ? String(decoding: utf8, as: UTF8.self) : String(validating: utf8, as: UTF8.self)
        }

        mutating func hex4() -> UInt32? {
            guard index + 4 <= bytes.count else { return nil }
            var value: UInt32 = 0
            for _ in 0..<4 {
                let byte = bytes[index]
                index += 1
                let digit: UInt8
                switch byte {
                case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
                case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
                case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
                default: return nil
                }
                value = value << 4 | UInt32(digit)
            }
            return value
        }
    }

    /// `text` as a JSON string literal, as ``write(quoted:into:)`` writes it.
    static func quoted(_ text: String) -> String {
        var out: [UInt8] = []
        out.reserveCapacity(text.utf8.count + 2)
        write(quoted: text, into: &out)
        return String(decoding: out, as: UTF8.self)
    }

    /// `text` as a JSON string literal, the protocol's one way of writing one (requests and replies): `"` and `\`
    /// escaped, the control characters as `\b`, `\t`, `\n`, `\f`, `\r` or `\u00XX`, everything else (`/`, DEL,
    /// any non-ASCII) as its UTF-8 bytes. This is what `JSONEncoder` writes, which ``MiniJSONEncoder`` must match.
    static func write(quoted text: String, into out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "\""), UInt8(ascii: "\\"): out.append(UInt8(ascii: "\\")); out.append(byte)
            case 0x20...: out.append(byte)
            case 0x08: out.append(UInt8(ascii: "\\")); out.append(UInt8(ascii: "b"))
            case 0x09: out.append(UInt8(ascii: "\\")); out.append(UInt8(ascii: "t"))
            case 0x0A: out.append(UInt8(ascii: "\\")); out.append(UInt8(ascii: "n"))
            case 0x0C: out.append(UInt8(ascii: "\\")); out.append(UInt8(ascii: "f"))
            case 0x0D: out.append(UInt8(ascii: "\\")); out.append(UInt8(ascii: "r"))
            default:
                let hex = "0123456789abcdef".utf8
                out.append(contentsOf: "\\u00".utf8)
                out.append(hex[hex.index(hex.startIndex, offsetBy: Int(byte >> 4))])
                out.append(hex[hex.index(hex.startIndex, offsetBy: Int(byte & 0x0F))])
            }
        }
        out.append(UInt8(ascii: "\""))
    }
}
