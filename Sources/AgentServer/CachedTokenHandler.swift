import AgentIPC
import AuthCore
import NIOCore

/// The socket's synchronous fast path, on the connection's event loop: decodes each request line (once, in place
/// when ``TokenRequestScanner`` can read it), answers a plain `token` request that the broker's ``TokenSnapshot``
/// can serve with pre-encoded reply bytes, and passes everything else, decoded and in arrival order, on to
/// ``SlowRequestHandler`` (a task per request).
///
/// "Plain" means what the broker would answer from its cache with no work and no other checks: an account, no
/// `force_refresh`, `interactive`, `id_token`, `scopes`, `resource` or `method`, a `min_valid` in range, a token
/// fresh for it and before its early-refresh moment (``TokenSnapshot/freshToken(account:minValid:)``). Right before
/// serving it asks ``AgentOperations/admitsFastPath(caller:account:)``. Replies can overtake those of slower
/// requests on the same connection, as concurrent requests already do (docs/PROTOCOL.md: match replies by `id`).
final class CachedTokenHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = RequestDispatcher.Decoded
    typealias OutboundOut = ByteBuffer

    private let caller: Caller
    private let operations: AgentOperations
    private let snapshot: TokenSnapshot
    /// Tells the connection registry the connection is in use (its idle-eviction order).
    private let touched: @Sendable () -> Void
    private var unflushed = false

    init(caller: Caller, operations: AgentOperations, touched: @escaping @Sendable () -> Void = {}) {
        self.caller = caller
        self.operations = operations
        self.snapshot = operations.broker.snapshot
        self.touched = touched
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let decoded = unwrapInboundIn(data).withUnsafeReadableBytes(WireRequest.decode(bytes:))
        // An unwritable channel (a client that does not read its replies) gets no more fast replies: the slow path
        // has the backpressure (the in-flight cap; each request waits for its writes) that bounds what the agent buffers for it.
        if case .request(let request) = decoded, context.channel.isWritable {
            var buffer = context.channel.allocator.buffer(capacity: 256)
            if CachedTokenHandler.answer(request, caller: caller, operations: operations, snapshot: snapshot, into: &buffer) {
                touched()
                context.write(wrapOutboundOut(buffer), promise: nil)
                unflushed = true
                return
            }
        }
        context.fireChannelRead(wrapInboundOut(decoded))
    }

    /// Appends the fast path's reply line to `buffer` when `request` is a plain `token` request that the snapshot
    /// serves and the account's policy admits without asking (then logged and audited); false, with nothing
    /// written, when the slow path must answer. Shared by this handler and ``AcceptLoop``.
    /// `log: false` for a request that was logged already (the accept loop's parked requests).
    static func answer(_ request: WireRequest, caller: Caller, operations: AgentOperations, snapshot: TokenSnapshot,
                       log: Bool = true, into buffer: inout ByteBuffer) -> Bool {
        guard let account = plainTokenAccount(request),
              let hit = snapshot.freshToken(account: account, minValid: .seconds(request.minValid ?? 0)),
              operations.admitsFastPath(caller: caller, account: account),
              TokenReplies.write(hit, id: request.id, snapshot: snapshot, into: &buffer) else { return false }
        if log { operations.logRequest(.token, account: account, caller: caller) }
        return true
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        flush(context)
        context.fireChannelReadComplete()
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        // The client half-closed: a last line without a newline was just decoded, with no read-complete after it.
        flush(context)
        context.fireUserInboundEventTriggered(event)
    }

    private func flush(_ context: ChannelHandlerContext) {
        guard unflushed else { return }
        unflushed = false
        context.flush()
    }

    /// The account of a `token` request the fast path may answer, or nil when the broker's path must (any option
    /// that changes the answer or needs a check the fast path does not make; out-of-range values get their error
    /// there).
    static func plainTokenAccount(_ request: WireRequest) -> String? {
        guard request.op == Operation.token.rawValue, let account = request.account, !account.isEmpty,
              request.forceRefresh != true, request.interactive != true, request.idToken != true,
              request.scopes == nil, request.resource == nil, request.method == nil else { return nil }
        if let minValid = request.minValid, !WireProtocol.minValidRange.contains(minValid) { return nil }
        return account
    }
}
