/// A strict reader for the request the socket sees most: a flat `{"v":1,"id":N,"op":"token","account":"NAME"}`,
/// optionally with `"min_valid":N`, keys in any order, JSON whitespace between tokens. It reads the bytes in place
/// (no `Data`, no Codable), so a cached-token hit costs no `JSONDecoder` pass.
///
/// All or nothing: it answers only when it is sure the line is exactly such a request, and gives nil for anything
/// else, which ``WireRequest/decode(line:)`` then hands to `JSONDecoder` (so errors and unusual spellings behave as
/// before): any other key or a repeated one, a backslash or a byte outside printable ASCII in a string, a number that
/// is not a plain integer fitting `Int` (no `-0`, fraction, exponent or leading zero), `v` other than
/// ``WireProtocol/version``, `op` other than `token`, `null` anywhere, trailing bytes. The fuzz tests
/// (Tests/FuzzTests/SocketRequestFuzzTests.swift, Tests/LibFuzzer/socket_request.swift) check that whatever it
/// reads, `JSONDecoder` reads identically.
enum TokenRequestScanner {
    static func scan(_ bytes: UnsafeRawBufferPointer) -> WireRequest? {
        var reader = Reader(bytes: bytes)
        return reader.request()
    }

    private struct Reader {
        let bytes: UnsafeRawBufferPointer
        var index = 0

        init(bytes: UnsafeRawBufferPointer) { self.bytes = bytes }

        private enum Key { case v, id, op, account, minValid }

        mutating func request() -> WireRequest? {
            var v: Int?, id: Int?, op: Bool?, account: String?, minValid: Int?
            guard take(UInt8(ascii: "{")) else { return nil }
            if take(UInt8(ascii: "}")) { return nil }
            repeat {
                guard let key = key(), take(UInt8(ascii: ":")) else { return nil }
                switch key {
                case .v:
                    guard v == nil, let value = integer() else { return nil }
                    v = value
                case .id:
                    guard id == nil, let value = integer() else { return nil }
                    id = value
                case .op:
                    guard op == nil, let value = string(), Reader.equals(value, "token") else { return nil }
                    op = true
                case .account:
                    guard account == nil, let value = string() else { return nil }
                    account = String(decoding: value, as: UTF8.self)
                case .minValid:
                    guard minValid == nil, let value = integer() else { return nil }
                    minValid = value
                }
            } while take(UInt8(ascii: ","))
            guard take(UInt8(ascii: "}")) else { return nil }
            skipSpace()
            guard index == bytes.count, v == WireProtocol.version, op == true else { return nil }
            return WireRequest(op: .token, id: id, account: account, minValid: minValid)
        }

        private mutating func key() -> Key? {
            guard let name = string() else { return nil }
            switch name.count {
            case 1 where name[name.startIndex] == UInt8(ascii: "v"): return .v
            case 2 where Reader.equals(name, "id"): return .id
            case 2 where Reader.equals(name, "op"): return .op
            case 7 where Reader.equals(name, "account"): return .account
            case 9 where Reader.equals(name, "min_valid"): return .minValid
            default: return nil
            }
        }

        /// `bytes` are `literal`'s UTF-8, compared byte by byte (no generic sequence comparison on the hot path).
        private static func equals(_ bytes: Slice<UnsafeRawBufferPointer>, _ literal: StaticString) -> Bool {
            guard bytes.count == literal.utf8CodeUnitCount else { return false }
            let expected = literal.utf8Start
            var offset = 0
            for byte in bytes {
                guard byte == expected[offset] else { return false }
                offset += 1
            }
            return true
        }

        /// The bytes of a string of printable ASCII without escapes (anything else: nil).
        private mutating func string() -> Slice<UnsafeRawBufferPointer>? {
            guard take(UInt8(ascii: "\"")) else { return nil }
            let start = index
            while index < bytes.count {
                let byte = bytes[index]
                if byte == UInt8(ascii: "\"") {
                    index += 1
                    return bytes[start..<(index - 1)]
                }
                guard byte >= 0x20, byte < 0x7F, byte != UInt8(ascii: "\\") else { return nil }
                index += 1
            }
            return nil
        }

        /// `-?[1-9][0-9]*` or `0`, within `Int`, not followed by a fraction or an exponent.
        private mutating func integer() -> Int? {
            skipSpace()
            let negative = index < bytes.count && bytes[index] == UInt8(ascii: "-")
            if negative { index += 1 }
            let start = index
            var value = 0
            while index < bytes.count, bytes[index] >= UInt8(ascii: "0"), bytes[index] <= UInt8(ascii: "9") {
                let digit = Int(bytes[index] - UInt8(ascii: "0"))
                let (times10, o1) = value.multipliedReportingOverflow(by: 10)
                let (next, o2) = negative ? times10.subtractingReportingOverflow(digit) : times10.addingReportingOverflow(digit)
                guard !o1, !o2 else { return nil }
                value = next
                index += 1
            }
            let digits = index - start
            guard digits > 0, digits == 1 || bytes[start] != UInt8(ascii: "0"), !(negative && value == 0) else { return nil }
            if index < bytes.count {
                let next = bytes[index]
                guard next != UInt8(ascii: "."), next != UInt8(ascii: "e"), next != UInt8(ascii: "E") else { return nil }
            }
            return value
        }

        /// Skips JSON whitespace, then consumes `byte` if it is next.
        private mutating func take(_ byte: UInt8) -> Bool {
            skipSpace()
            guard index < bytes.count, bytes[index] == byte else { return false }
            index += 1
            return true
        }

        private mutating func skipSpace() {
            while index < bytes.count {
                switch bytes[index] {
                case 0x20, 0x09, 0x0A, 0x0D: index += 1
                default: return
                }
            }
        }
    }
}
