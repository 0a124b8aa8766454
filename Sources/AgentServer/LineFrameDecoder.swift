import NIOCore

/// Splits the byte stream into lines and refuses any line longer than `maxLength` (SECURITY.md 22): the bytes are
/// never buffered past the cap.
struct LineFrameDecoder: ByteToMessageDecoder {
    typealias InboundOut = ByteBuffer

    struct LineTooLong: Error {}

    let maxLength: Int
    private var scanned = 0

    init(maxLength: Int) { self.maxLength = maxLength }

    mutating func decode(context: ChannelHandlerContext, buffer: inout ByteBuffer) throws -> DecodingState {
        let view = buffer.readableBytesView
        let start = view.startIndex
        if let newline = view[(start + scanned)...].firstIndex(of: 0x0A) {
            let length = newline - start
            guard length <= maxLength else { throw LineTooLong() }
            var line = buffer.readSlice(length: length)!
            buffer.moveReaderIndex(forwardBy: 1)
            if line.readableBytesView.last == 0x0D { line = line.getSlice(at: line.readerIndex, length: line.readableBytes - 1)! }
            scanned = 0
            context.fireChannelRead(wrapInboundOut(line))
            return .continue
        }
        scanned = view.count
        guard view.count <= maxLength else { throw LineTooLong() }
        return .needMoreData
    }

    mutating func decodeLast(context: ChannelHandlerContext, buffer: inout ByteBuffer, seenEOF: Bool) throws -> DecodingState {
        // A final request without a trailing newline still counts (e.g. `printf '{...}' | socat`).
        let state = try decode(context: context, buffer: &buffer)
        if state == .needMoreData, buffer.readableBytes > 0 {
            let line = buffer.readSlice(length: buffer.readableBytes)!
            scanned = 0
            context.fireChannelRead(wrapInboundOut(line))
        }
        return .needMoreData
    }
}
