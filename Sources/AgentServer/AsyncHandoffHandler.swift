import NIOCore

/// The last handler of a connection's pipeline, behind ``CachedTokenHandler``. While every request is a fast-path
/// hit the connection lives on the event loop only: no `NIOAsyncChannel`, no task. The first request the fast path
/// passes on (or a line over the length cap) starts the async side: `startAsyncSide` wraps the channel and hands it
/// to the server's task group (``SocketServer/serve(_:)``), and from then on everything is passed through to it.
/// Replies keep their order: fast-path replies were written before the hand-off, on the same loop.
final class AsyncHandoffHandler: ChannelInboundHandler {
    typealias InboundIn = RequestDispatcher.Decoded
    typealias InboundOut = RequestDispatcher.Decoded
    typealias OutboundOut = ByteBuffer

    /// Wraps the channel and hands it over; false when the server no longer takes connections (shutting down).
    private let startAsyncSide: (any Channel) throws -> Bool
    private var handedOff = false

    init(startAsyncSide: @escaping (any Channel) throws -> Bool) {
        self.startAsyncSide = startAsyncSide
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard handedOff || handOff(context) else { return }
        context.fireChannelRead(data)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if !handedOff {
            // An over-long line gets the same message_too_large reply as on the async side, from the async side;
            // any other error (a reset) just ends a connection that has nothing in flight.
            guard error is LineFrameDecoder.LineTooLong, handOff(context) else {
                context.close(promise: nil)
                return
            }
        }
        context.fireErrorCaught(error)
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if !handedOff, event as? ChannelEvent == .inputClosed {
            // The client is done sending and every request was answered here. Close once the replies written so
            // far have left (an empty write completes after them; closing at once would drop unsent ones).
            let channel = context.channel
            context.writeAndFlush(wrapOutboundOut(ByteBuffer())).whenComplete { _ in channel.close(promise: nil) }
            return
        }
        context.fireUserInboundEventTriggered(event)
    }

    private func handOff(_ context: ChannelHandlerContext) -> Bool {
        do {
            handedOff = try startAsyncSide(context.channel)
        } catch {
            handedOff = false
        }
        if !handedOff { context.close(promise: nil) }
        return handedOff
    }
}

/// A connection the agent does not serve (another user, or the connection cap with every connection busy): one
/// error line if there is one, then close. Nothing the peer sends is read or decoded.
final class RefusingHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private let reply: [UInt8]?

    init(reply: [UInt8]?) { self.reply = reply }

    func channelActive(context: ChannelHandlerContext) {
        context.fireChannelActive()
        guard let reply else {
            context.close(promise: nil)
            return
        }
        let channel = context.channel
        context.writeAndFlush(wrapOutboundOut(ByteBuffer(bytes: reply + [0x0A]))).whenComplete { _ in
            channel.close(promise: nil)
        }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {}
}
