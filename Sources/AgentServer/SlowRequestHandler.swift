import AgentIPC
import NIOCore

/// The last handler of a connection's pipeline, behind ``CachedTokenHandler``: every request the fast path passes
/// on runs as a task of its own (``RequestDispatcher/execute(_:caller:emit:)``), which writes its event lines and
/// its reply to the channel. The connection itself keeps no task and no `NIOAsyncChannel`: one that waits for its
/// next line costs its channel only, a tenth of what a task per connection kept (docs/BENCHMARKS.md, "The socket
/// path").
///
/// What this handler keeps, on the event loop:
/// - at most ``SocketServer/maxInFlightPerConnection`` requests in flight: at the cap it stops reading until one
///   ends (a client that does not read its replies also holds its requests here: each waits for its writes);
/// - requests that wait for a person (a sign-in, a consent question) are cancelled when the client hangs up or
///   half-closes; the others still finish (a refresh's result is cached) and answer a half-closed client;
/// - once the client has half-closed (or sent an over-long line) and the last request has answered, the connection
///   closes, after the replies written so far have left;
/// - the connection registry's busy mark while a request runs (so eviction takes idle connections only).
final class SlowRequestHandler: ChannelInboundHandler {
    typealias InboundIn = RequestDispatcher.Decoded
    typealias OutboundOut = ByteBuffer

    private let dispatcher: RequestDispatcher
    private let caller: Caller
    private let connections: ConnectionRegistry
    private let registration: Int
    /// Counts the requests started here (tests check that fast-path hits start none).
    private let started: @Sendable () -> Void

    private var inFlight = 0
    private var readsPaused = false
    /// The client will send nothing more (half-close, an over-long line): close once nothing is in flight.
    private var inputDone = false
    private var closing = false
    private var nextSerial = 0
    /// Requests that wait for a person, by serial: cancelled when the client goes away.
    private var personTasks: [Int: Task<Void, Never>] = [:]

    init(dispatcher: RequestDispatcher, caller: Caller, connections: ConnectionRegistry, registration: Int,
         started: @escaping @Sendable () -> Void) {
        self.dispatcher = dispatcher
        self.caller = caller
        self.connections = connections
        self.registration = registration
        self.started = started
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .invalid(let id, let error):
            let channel = context.channel
            context.writeAndFlush(wrapOutboundOut(SlowRequestHandler.line(dispatcher.encodeError(id, error), channel)), promise: nil)
        case .request(let request):
            start(request, context: context)
        }
    }

    private func start(_ request: WireRequest, context: ChannelHandlerContext) {
        started()
        inFlight += 1
        connections.begin(registration)
        if inFlight >= SocketServer.maxInFlightPerConnection, !readsPaused {
            readsPaused = true
            context.channel.setOption(ChannelOptions.autoRead, value: false).whenFailure { _ in }
        }
        nextSerial += 1
        let serial = nextSerial
        let (dispatcher, caller, channel, loop) = (self.dispatcher, self.caller, context.channel, context.eventLoop)
        let handler = NIOLoopBound(self, eventLoop: loop)
        let waitsForPerson = dispatcher.waitsForPerson(request)
        let task = Task {
            let reply = await dispatcher.execute(request, caller: caller) { await SlowRequestHandler.write($0, to: channel) }
            await SlowRequestHandler.write(reply, to: channel)
            loop.execute { handler.value.finished(serial, channel: channel) }
        }
        if waitsForPerson { personTasks[serial] = task }
    }

    /// On the event loop, when a request has written its reply (or failed to: the client is gone).
    private func finished(_ serial: Int, channel: any Channel) {
        personTasks[serial] = nil
        inFlight -= 1
        connections.end(registration)
        if readsPaused, inFlight < SocketServer.maxInFlightPerConnection, !inputDone {
            readsPaused = false
            channel.setOption(ChannelOptions.autoRead, value: true).whenFailure { _ in }
        }
        closeIfDone(channel)
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event as? ChannelEvent == .inputClosed {
            // The client is done sending: requests that only answer still get their reply; those that wait for a
            // person are withdrawn.
            inputDone = true
            cancelPersonTasks()
            closeIfDone(context.channel)
            return
        }
        context.fireUserInboundEventTriggered(event)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        guard error is LineFrameDecoder.LineTooLong else {
            // A reset or another read error: the client is gone; running requests finish on their own.
            cancelPersonTasks()
            context.close(promise: nil)
            return
        }
        let reply = dispatcher.encodeError(nil, WireError(.messageTooLarge,
            "a request line exceeded \(WireProtocol.maxMessageBytes) bytes; closing the connection"))
        context.writeAndFlush(wrapOutboundOut(SlowRequestHandler.line(reply, context.channel)), promise: nil)
        inputDone = true
        context.channel.setOption(ChannelOptions.autoRead, value: false).whenFailure { _ in }
        closeIfDone(context.channel)
    }

    func channelInactive(context: ChannelHandlerContext) {
        cancelPersonTasks()
        context.fireChannelInactive()
    }

    private func cancelPersonTasks() {
        for task in personTasks.values { task.cancel() }
        personTasks = [:]
    }

    /// Closes once the client will send nothing more and every request has answered, after the replies written so
    /// far have left (an empty write completes after them; closing at once would drop unsent ones).
    private func closeIfDone(_ channel: any Channel) {
        guard inputDone, inFlight == 0, !closing else { return }
        closing = true
        channel.writeAndFlush(ByteBuffer()).whenComplete { _ in channel.close(promise: nil) }
    }

    /// Writes one line and waits until it has been written (or failed: a vanished client). Waiting is what makes a
    /// client that does not read hold its requests in flight, so the cap bounds what the agent buffers for it.
    static func write(_ line: [UInt8], to channel: any Channel) async {
        try? await channel.writeAndFlush(SlowRequestHandler.line(line, channel)).get()
    }

    static func line(_ bytes: [UInt8], _ channel: any Channel) -> ByteBuffer {
        var buffer = channel.allocator.buffer(capacity: bytes.count + 1)
        buffer.writeBytes(bytes)
        buffer.writeInteger(UInt8(0x0A))
        return buffer
    }
}
