import AgentService
import AgentIPC
import AgentAccess

/// One method call of `dev.authagent.Agent1`, with its arguments (already type-checked by sd-bus against the
/// vtable in CAgentBus).
public enum BusCall: Sendable, Equatable {
    case getAccessToken(account: String, minValid: UInt32)
    /// A token and, when it is DPoP-bound, a proof for the request named (RFC 9449).
    case getAccessTokenForRequest(account: String, minValid: UInt32, method: String, url: String, nonce: String?)
    case listAccounts
    case getStatus
    case login(account: String)
    case logout(account: String)
    /// Asks for the interface's signals on this connection until it leaves the bus (``SignalSubscribers``).
    case subscribe

    /// Calls that wait for a person: cancelled when their caller leaves the bus or the agent shuts down. A sign-in,
    /// and a token request that may wait for a consent answer (`confirm = "first-use"`, or a sandboxed caller).
    public func waitsForPerson(_ ops: AgentOperations, caller: Caller) -> Bool {
        switch self {
        case .login: return true
        case .getAccessToken(let account, _), .getAccessTokenForRequest(let account, _, _, _, _):
            return ops.tokenMayWaitForPerson(account: account, caller: caller)
        default: return false
        }
    }
}

/// What goes back to the caller: the method's out arguments, or a named error.
public enum BusReply: Sendable, Equatable {
    case values([BusValue])
    case error(name: String, message: String)
}

/// The interface's semantics: each method is one of the shared ``AgentOperations`` (the very calls the socket
/// protocol makes), its result encoded as D-Bus values and its ``WireError`` as the matching named error. Nothing
/// here knows about sd-bus, so it is tested without a bus.
public enum AgentBusAPI {
    public static func perform(_ call: BusCall, on ops: AgentOperations, caller: Caller) async -> BusReply {
        do throws(WireError) {
            switch call {
            case .getAccessToken(let account, let minValid):
                let token = try await ops.perform(.token, account: account, caller: caller) { () async throws(WireError) in
                    try await ops.token(account: account, WireRequest(op: .token) { $0.minValid = Int(minValid) }, caller: caller)
                }
                // `x expires_at` cannot be absent: 0 says the token does not expire (docs/DBUS.md).
                return .values([.string(token.accessToken), .int64(Int64(token.expiresAt ?? 0))])
            case .getAccessTokenForRequest(let account, let minValid, let method, let url, let nonce):
                let token = try await ops.perform(.token, account: account, caller: caller) { () async throws(WireError) in
                    try await ops.token(account: account, WireRequest(op: .token) {
                        $0.minValid = Int(minValid); $0.dpopMethod = method; $0.dpopURL = url; $0.dpopNonce = nonce
                    }, caller: caller)
                }
                return .values([.string(token.tokenType), .string(token.accessToken), .string(token.dpopProof ?? ""),
                                .int64(Int64(token.expiresAt ?? 0))])
            case .listAccounts:
                let list = try await ops.perform(.accounts, account: nil, caller: caller) { await ops.accounts(caller: caller) }
                return .values([.dictArray(list.accounts.map { BusValue.dictionary(encoding: $0) })])
            case .getStatus:
                let status = try await ops.perform(.status, account: nil, caller: caller) { await ops.status(caller: caller) }
                return .values([.dict(BusValue.dictionary(encoding: status.agent)),
                                .dictArray(status.accounts.map { BusValue.dictionary(encoding: $0) })])
            case .login(let account):
                let result = try await ops.perform(.login, account: account, caller: caller) { () async throws(WireError) in
                    try await ops.login(account: account)
                }
                return .values([.dict(BusValue.dictionary(encoding: result))])
            case .logout(let account):
                let result = try await ops.perform(.logout, account: account, caller: caller) { () async throws(WireError) in
                    try await ops.logout(account: account)
                }
                return .values([.dict(BusValue.dictionary(encoding: result))])
            case .subscribe:
                // Recorded by the bus object, which knows the sender's unique name; nothing to answer.
                return .values([])
            }
        } catch {
            return .error(name: DBusErrorName.forCode(error.code), message: error.message)
        }
    }
}
