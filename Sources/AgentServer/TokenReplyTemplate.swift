import AgentIPC
import NIOCore

/// A reply line encoded once, with holes for the integers that change per request (`id`, `expires_at`,
/// `expires_in`), so the socket's fast path answers a cached `token` request without `JSONEncoder`.
///
/// The bytes come from the slow path's own encoder (``RequestDispatcher/encodeLine(_:)``) run with a sentinel in
/// each hole, so key order, escaping and formatting are identical by construction; AgentServerTests compare the two
/// byte for byte. A hole is found by its key, `"expires_in":<sentinel>`, which cannot occur inside an encoded string
/// (a quote there is escaped).
struct TokenReplyTemplate: Sendable {
    /// `segments.count == holes + 1`: segment, value, segment, value, ..., segment.
    private let segments: [[UInt8]]

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
    }

    /// The reply to a cached token for `id` (with the key left out when nil, as `JSONEncoder` does), without the
    /// token's varying integers.
    static func make(_ result: TokenResult, id: Bool) -> TokenReplyTemplate? {
        var result = result
        result.expiresAt = sentinel
        result.expiresIn = sentinel
        let line = RequestDispatcher.encodeLine(WireResponse(id: id ? sentinel : nil, result: result))
        return TokenReplyTemplate(encoded: line, holes: (id ? ["id"] : []) + ["expires_at", "expires_in"])
    }

    /// Appends the line with the values in the holes, in order, and the newline (two or three holes; fixed
    /// arguments rather than variadics, so no array is allocated per reply).
    func write(_ first: Int, _ second: Int, _ third: Int? = nil, into buffer: inout ByteBuffer) {
        precondition(segments.count == (third == nil ? 3 : 4), "one value per hole")
        buffer.writeBytes(segments[0])
        TokenReplyTemplate.writeDecimal(first, into: &buffer)
        buffer.writeBytes(segments[1])
        TokenReplyTemplate.writeDecimal(second, into: &buffer)
        buffer.writeBytes(segments[2])
        if let third {
            TokenReplyTemplate.writeDecimal(third, into: &buffer)
            buffer.writeBytes(segments[3])
        }
        buffer.writeInteger(UInt8(0x0A))
    }

    /// `String(value)`'s bytes, without the String.
    static func writeDecimal(_ value: Int, into buffer: inout ByteBuffer) {
        if value < 0 { buffer.writeInteger(UInt8(ascii: "-")) }
        var magnitude = value.magnitude
        var digits: (UInt64, UInt64, UInt64) = (0, 0, 0)  // 24 bytes: room for UInt64.max's 20 digits
        let count = withUnsafeMutableBytes(of: &digits) { raw -> Int in
            var end = raw.count
            repeat {
                end -= 1
                raw[end] = UInt8(ascii: "0") + UInt8(magnitude % 10)
                magnitude /= 10
            } while magnitude > 0
            return end
        }
        withUnsafeBytes(of: &digits) { raw in buffer.writeBytes(UnsafeRawBufferPointer(rebasing: raw[count...])) }
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
