import AgentService
import AgentIPC
import AgentAccess
import FoundationEssentials
import Logging

/// The socket protocol's front end: decodes a request line, runs it as one of the shared ``AgentOperations`` (which
/// the D-Bus object calls too) and encodes the result, event or error as reply lines.
public struct RequestDispatcher: Sendable {
    /// The typed operations this dispatcher maps requests onto; the D-Bus object uses the same ones.
    public let operations: AgentOperations

    /// `operations` is built by the composition root and handed to every front end.
    public init(operations: AgentOperations) {
        self.operations = operations
    }

    /// Operations that wait for a person; they are cancelled when the client goes away: a sign-in, a `token`
    /// request that is interactive or may wait for a consent answer (which is then withdrawn, not left to time out),
    /// and a `forward` session (its authctl waits for ssh to end).
    public func waitsForPerson(_ request: WireRequest, caller: Caller) -> Bool {
        if request.op == Operation.login.rawValue || request.op == Operation.forward.rawValue { return true }
        guard request.op == Operation.token.rawValue else { return false }
        return request.interactive == true || operations.tokenMayWaitForPerson(account: request.account, caller: caller)
    }

    /// Operations whose work nothing but their reply uses: `diagnose` asks every account's authorization server (up
    /// to 15 s each); its client gone, it is cancelled. A `token` request is not: its refresh's result is cached.
    public func onlyForItsReply(_ request: WireRequest) -> Bool {
        request.op == Operation.diagnose.rawValue
    }

    /// Executes a request and returns the final reply line (without newline). Event lines go through `emit`.
    public func execute(_ request: WireRequest, caller: Caller,
                        emit: @escaping @Sendable ([UInt8]) async -> Void) async -> [UInt8] {
        let op = Operation(rawValue: request.op) ?? .ping
        let ops = operations
        let said = AgentOperations.withSaidProgram(request.program, caller)
        let id = request.id
        let event: @Sendable (WireEvent) async -> Void = {
            await emit(RequestDispatcher.encodeLine(WireResponse<NoResult>(id: id, event: $0)))
        }
        do throws(WireError) {
            // `token` as a grant (a hook of the desktop's): served as that grant's caller from here on.
            var asked = said
            if op == .token, let grant = request.grant { asked = try ops.asGrant(grant, caller: said) }
            let caller = asked
            // Each operation reads the members it takes from the request itself.
            return try await ops.perform(op, account: request.account, caller: caller) { () async throws(WireError) -> [UInt8] in
                switch op {
                case .ping: return encode(id, ops.ping())
                case .status: return encode(id, await ops.status(caller: caller))
                case .accounts: return encode(id, await ops.accounts(caller: caller))
                case .token:
                    return encode(id, try await ops.token(account: try requireAccount(request), request, caller: caller,
                                                          loginStarted: event))
                case .login:
                    return encode(id, try await ops.login(account: try requireAccount(request), request, loginStarted: event))
                case .loginCallback: return encode(id, try await ops.loginCallback(request))
                case .logout: return encode(id, try await ops.logout(account: try requireAccount(request)))
                case .diagnose: return encode(id, try await ops.diagnose(account: request.account))
                case .audit: return encode(id, ops.audit(request))
                case .pending: return encode(id, ops.pending())
                case .approve, .deny: return encode(id, try ops.answer(request, allow: op == .approve, caller: caller))
                case .forget: return encode(id, try ops.forget(request, caller: caller))
                case .reload: return encode(id, try await ops.reload())
                case .forward: return encode(id, try await ops.forward(request, caller: caller, opened: event))
                case .forwardSSH: return encode(id, try ops.bindForward(request, caller: caller))
                case .forwardHostKey: return encode(id, try ops.forwardHostKey(request, caller: caller))
                case .forwardStop: return encode(id, try ops.stopForward(request))
                case .grant: return encode(id, try await ops.makeGrant(request, caller: caller, loginStarted: event))
                case .grantRevoke: return encode(id, try ops.revokeGrant(request))
                case .lock, .unlock: return encode(id, ops.setLock(op == .lock))
                }
            }
        } catch {
            return encodeError(id, error)
        }
    }

    /// The socket protocol's `token`, `login` and `logout` name their account; D-Bus's take it as an argument.
    private func requireAccount(_ request: WireRequest) throws(WireError) -> String {
        guard let account = request.account, !account.isEmpty else {
            throw WireError(.badRequest, "the '\(request.op)' request needs an 'account'")
        }
        return account
    }

    // MARK: Encoding

    public func encode<R: Codable & Sendable>(_ id: Int?, _ result: R) -> [UInt8] {
        RequestDispatcher.encodeLine(WireResponse(id: id, result: result))
    }

    public func encodeError(_ id: Int?, _ error: WireError) -> [UInt8] {
        RequestDispatcher.encodeLine(WireResponse<NoResult>(id: id, error: error))
    }

    static func encodeLine<T: Encodable>(_ value: T) -> [UInt8] {
        (try? MiniJSONEncoder.encode(value))
            ?? Array(#"{"v":1,"error":{"code":"internal_error","message":"cannot encode reply"}}"#.utf8)
    }
}
