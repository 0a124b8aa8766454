import AgentIPC
import NIOCore

/// A reply line encoded once, with holes for the integers that change per request (`id`, `expires_at`,
/// `expires_in`), so the socket's fast path answers a cached `token` request without `JSONEncoder`. A token that does
/// not expire (``TokenExpiry/never``) has no expiry holes: its line carries `does_not_expire` instead.
///
/// The bytes come from the slow path's own encoder (``RequestDispatcher/encodeLine(_:)``) run with a sentinel in
/// each hole, so key order, escaping and formatting are identical by construction; AgentServerTests compare the two
/// byte for byte. A hole is found by its key, `"expires_in":<sentinel>`, which cannot occur inside an encoded string
/// (a quote there is escaped).
struct TokenReplyTemplate: Sendable {
    /// `segments.count == holes + 1`: segment, value, segment, value, ..., segment.
    private let segments: [[UInt8]]
    /// The segments' bytes together.
    private let segmentBytes: Int

    static let sentinel = Int.min

    /// Nil when a hole's key is missing or repeated (the caller then takes the slow path).
    init?(encoded: [UInt8], holes: [String]) {
        var segments: [[UInt8]] = []
        var rest = encoded[...]
        for key in holes {
            let marker = Array("\"\(key)\":\(TokenReplyTemplate.sentinel)".utf8)
            guard let at = TokenReplyTemplate.find(marker, in: rest),
                  TokenReplyTemplate.find(marker, in: rest[(at + marker.count)...]) == nil else { return nil }
            let valueStart = at + marker.count - String(TokenReplyTemplate.sentinel).utf8.count
            segments.append(Array(rest[..<valueStart]))
            rest = rest[(at + marker.count)...]
        }
        segments.append(Array(rest))
        self.segments = segments
        segmentBytes = segments.reduce(0) { $0 + $1.count }
    }

    /// The reply to a cached token for `id` (with the key left out when nil, as `JSONEncoder` does), without the
    /// token's varying integers (none but `id` for a token that does not expire).
    static func make(_ result: TokenResult, id: Bool) -> TokenReplyTemplate? {
        var result = result
        var holes = id ? ["id"] : []
        if case .after = result.expiry {
            result.expiry = .after(seconds: sentinel, unixTime: sentinel)
            holes += ["expires_at", "expires_in"]
        }
        let line = RequestDispatcher.encodeLine(WireResponse(id: id ? sentinel : nil, result: result))
        return TokenReplyTemplate(encoded: line, holes: holes)
    }

    /// The number of holes the template has (``write(_:_:_:into:)`` fills two or three, ``write(id:into:)`` zero or one).
    var holes: Int { segments.count - 1 }

    /// Appends the line of a token that does not expire, with `id` in its one hole (none when `id` is nil), and the
    /// newline.
    func write(id: Int?, into buffer: inout ByteBuffer) {
        precondition(segments.count == (id == nil ? 1 : 2), "one value per hole")
        buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: segmentBytes + TokenReplyTemplate.maxDecimalBytes + 1) { out in
            var at = 0
            TokenReplyTemplate.copy(segments[0], to: out, at: &at)
            if let id {
                TokenReplyTemplate.copyDecimal(id, to: out, at: &at)
                TokenReplyTemplate.copy(segments[1], to: out, at: &at)
            }
            out[at] = 0x0A
            return at + 1
        }
    }

    /// Appends the line with the values in the holes, in order, and the newline (two or three holes; fixed
    /// arguments rather than variadics, so no array is allocated per reply). One reservation of the buffer and plain
    /// copies into it: this runs for every cached token the socket hands out.
    func write(_ first: Int, _ second: Int, _ third: Int? = nil, into buffer: inout ByteBuffer) {
        precondition(segments.count == (third == nil ? 3 : 4), "one value per hole")
        let most = segmentBytes + 3 * TokenReplyTemplate.maxDecimalBytes + 1
        buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: most) { out in
            var at = 0
            TokenReplyTemplate.copy(segments[0], to: out, at: &at)
            TokenReplyTemplate.copyDecimal(first, to: out, at: &at)
            TokenReplyTemplate.copy(segments[1], to: out, at: &at)
            TokenReplyTemplate.copyDecimal(second, to: out, at: &at)
            TokenReplyTemplate.copy(segments[2], to: out, at: &at)
            if let third {
                TokenReplyTemplate.copyDecimal(third, to: out, at: &at)
                TokenReplyTemplate.copy(segments[3], to: out, at: &at)
            }
            out[at] = 0x0A
            return at + 1
        }
    }

    /// The most bytes an `Int` takes in decimal: `Int.min`'s sign and 19 digits.
    static let maxDecimalBytes = 20

    private static func copy(_ bytes: [UInt8], to out: UnsafeMutableRawBufferPointer, at: inout Int) {
        bytes.withUnsafeBytes { source in
            guard let base = source.baseAddress, let target = out.baseAddress else { return }
            (target + at).copyMemory(from: base, byteCount: source.count)
        }
        at += bytes.count
    }

    /// `String(value)`'s bytes, written at `at` (room for ``maxDecimalBytes`` is reserved by the caller).
    private static func copyDecimal(_ value: Int, to out: UnsafeMutableRawBufferPointer, at: inout Int) {
        if value < 0 {
            out[at] = UInt8(ascii: "-")
            at += 1
        }
        var magnitude = value.magnitude
        var digits = 1
        var scale: UInt = 1
        while magnitude / scale >= 10 {
            scale *= 10
            digits += 1
        }
        for index in stride(from: at + digits - 1, through: at, by: -1) {
            out[index] = UInt8(ascii: "0") + UInt8(magnitude % 10)
            magnitude /= 10
        }
        at += digits
    }

    /// `String(value)`'s bytes, without the String (the same digits ``write(_:_:_:into:)`` puts in the holes).
    static func writeDecimal(_ value: Int, into buffer: inout ByteBuffer) {
        buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: maxDecimalBytes) { out in
            var at = 0
            copyDecimal(value, to: out, at: &at)
            return at
        }
    }

    private static func find(_ needle: [UInt8], in haystack: ArraySlice<UInt8>) -> Int? {
        guard !needle.isEmpty, haystack.count >= needle.count else { return nil }
        var index = haystack.startIndex
        while index <= haystack.endIndex - needle.count {
            if haystack[index] == needle[0], haystack[index..<(index + needle.count)].elementsEqual(needle) { return index }
            index += 1
        }
        return nil
    }
}
