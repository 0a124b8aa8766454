import AgentIPC
import AgentService
import AuthCore
import NIOCore

/// The socket's synchronous answer to a plain `token` request that the broker's ``TokenSnapshot`` can serve:
/// pre-encoded reply bytes (``TokenReplies``), written by the ``AcceptLoop`` on its own thread, with no task.
///
/// "Plain" means what the broker would answer from its cache with no work and no other checks: an account, no
/// `force_refresh`, `interactive`, `id_token`, `scopes`, `resource` or `method`, a `min_valid` in range, a token
/// fresh for it and before its early-refresh moment (``TokenSnapshot/freshToken(account:minValid:)``). Right before
/// serving it asks ``AgentOperations/admitsFastPath(caller:account:)``. Such replies can overtake those of slower
/// requests on the same connection, as concurrent requests already do (docs/PROTOCOL.md: match replies by `id`).
enum CachedTokenAnswer {
    /// Appends the reply line to `buffer` when `request` is a plain `token` request that the snapshot serves and the
    /// account's policy admits without asking (then audited; the caller logs the request); false, with nothing
    /// written, when the broker must answer.
    static func answer(_ request: WireRequest, caller: Caller, operations: AgentOperations, snapshot: TokenSnapshot,
                       into buffer: inout ByteBuffer) -> Bool {
        guard let account = plainTokenAccount(request),
              let hit = snapshot.freshToken(account: account, minValid: .seconds(request.minValid ?? 0)),
              operations.admitsFastPath(caller: caller, account: account),
              TokenReplies.write(hit, id: request.id, snapshot: snapshot, into: &buffer) else { return false }
        return true
    }

    /// ``answer(_:caller:operations:snapshot:into:)`` as a line without its newline, for a request on the async side.
    static func line(_ request: WireRequest, caller: Caller, operations: AgentOperations) -> [UInt8]? {
        var buffer = ByteBufferAllocator().buffer(capacity: 512)
        guard answer(request, caller: caller, operations: operations, snapshot: operations.broker.snapshot,
                     into: &buffer) else { return nil }
        return Array(buffer.readableBytesView.dropLast())
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
