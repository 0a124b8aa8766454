import AgentAccess
import AgentIPC
import AuthCore
import FoundationEssentials
import Logging

/// `authctl forward`: sessions that forward the agent to another host over ssh (``ForwardSessions``), and what a
/// confined caller (a forwarded host, a sandboxed app) may ask at all.
extension AgentOperations {
    /// What a confined caller (``ClientIdentity/isConfined``) may ask: tokens (with DPoP proofs) and the accounts it
    /// may use. Sign-ins, consent answers, configuration and forwards are for programs on this computer.
    static let confinedOperations: Set<AgentIPC.Operation> = [.ping, .token, .status, .accounts]

    /// Refuses what a confined caller may not ask.
    func admitConfined(_ op: AgentIPC.Operation, caller: Caller) throws(WireError) {
        guard caller.identity.isConfined, !AgentOperations.confinedOperations.contains(op) else { return }
        throw WireError(.permissionDenied,
            "\(caller.identity.summary) may only get tokens of the accounts it was given: '\(op.rawValue)' is for programs on the computer where the agent runs")
    }

    /// `forward`: opens a session for `host` (``ForwardSessions/open(host:owner:directory:)``), says where its socket
    /// is through `opened`, and holds it until the request is cancelled (its client went away) or the session is
    /// stopped; then closes it.
    public func forward(_ request: WireRequest, caller: Caller,
                        opened: @Sendable (WireEvent) async -> Void) async throws(WireError) -> ForwardResult {
        guard let host = request.host, !host.isEmpty else { throw WireError(.badRequest, "the 'forward' request needs a 'host'") }
        let directory = String(info.socketPath[..<(info.socketPath.lastIndex(of: "/") ?? info.socketPath.startIndex)])
        let (session, stopped) = try forwards.open(host: host, owner: caller, directory: directory)
        logger.notice("forward opened", metadata: ["host": "\(host)", "peer_pid": "\(caller.pid)"])
        defer {
            forwards.close(session.id)
            access.endRun(session.id)
            logger.notice("forward closed", metadata: ["host": "\(host)"])
        }
        await opened(WireEvent(type: WireEvent.forwardOpen) { $0.session = session.id; $0.socket = session.socketPath })
        for await _ in stopped {}
        return ForwardResult(host: host, ended: Task.isCancelled ? "closed" : "stopped")
    }

    /// `forward_ssh`: the ssh a session serves.
    public func bindForward(_ request: WireRequest, caller: Caller) throws(WireError) -> ForwardChangeResult {
        guard let session = request.session, let pid = request.pid else { throw WireError(.badRequest, "'forward_ssh' needs 'session' and 'pid'") }
        try forwards.bindSSH(session, pid: pid, by: caller)
        return ForwardChangeResult()
    }

    /// `forward_host_key`: the host key ssh was shown, from ssh's `KnownHostsCommand`.
    public func forwardHostKey(_ request: WireRequest, caller: Caller) throws(WireError) -> ForwardChangeResult {
        guard let session = request.session, let fingerprint = request.fingerprint else {
            throw WireError(.badRequest, "'forward_host_key' needs 'session' and 'fingerprint'")
        }
        try forwards.recordHostKey(session, fingerprint: fingerprint, by: caller)
        return ForwardChangeResult()
    }

    /// `forward_stop`: ends the sessions for `host` now. Tokens already handed out stay valid until they expire.
    public func stopForward(_ request: WireRequest) throws(WireError) -> ForwardChangeResult {
        guard let host = request.host, !host.isEmpty else { throw WireError(.badRequest, "'forward_stop' needs a 'host'") }
        let stopped = forwards.stop(host: host)
        if !stopped.isEmpty { logger.notice("forward stopped", metadata: ["host": "\(host)", "sessions": "\(stopped.count)"]) }
        return ForwardChangeResult(stopped: stopped.map(\.host))
    }

    /// The open sessions as `status` shows them; nil when there are none (the member is then absent).
    func forwardSummaries() -> [StatusResult.Forward]? {
        let sessions = forwards.list()
        guard !sessions.isEmpty else { return nil }
        return sessions.map {
            StatusResult.Forward(host: $0.host, hostKey: $0.fingerprint, sshPID: $0.sshPID.map(Int.init),
                                 since: Int($0.opened.timeIntervalSince1970))
        }
    }

    /// A forwarded caller with the program its host says asks (`program`, not verified: shown as said by the host,
    /// never judged); any other caller unchanged.
    public static func withSaidProgram(_ program: String?, _ caller: Caller) -> Caller {
        guard let program, !program.isEmpty, case .host(let name, let fingerprint, _)? = caller.identity.forward else {
            return caller
        }
        var said = caller
        let printable = String(String.UnicodeScalarView(program.unicodeScalars.prefix(256).filter { $0.value >= 0x20 && $0.value != 0x7F }))
        said.identity.forward = .host(name: name, fingerprint: fingerprint, program: printable)
        return said
    }

    /// Whether `caller` may use `account` now without anyone being asked: what a confined caller is shown.
    func serves(_ caller: Caller, account: String) -> Bool {
        if case .grant = access.verdict(caller, account: account) { return true }
        return false
    }
}

extension AgentOperations {
    /// Runs `body` for `caller`; a sign-in it needs, for a confined caller, is refused with where to sign in: never
    /// on the other host or in the sandbox, only on the desktop, by its user.
    func signInElsewhere<T>(_ account: String, for caller: Caller,
                            _ body: () async throws(WireError) -> T) async throws(WireError) -> T {
        do {
            return try await body()
        } catch where error.code == ErrorCode.loginRequired.rawValue && caller.identity.isConfined {
            logger.notice("a sign-in is needed for a confined caller", metadata: [
                "account": "\(account)", "via": "\(caller.via)"])
            broker.announceSignInWanted(account, by: caller.identity.summary)
            throw WireError(.loginRequired,
                "account '\(account)' needs a sign-in, which happens on the computer where the agent runs, not here: run `authctl login \(account)` there",
                retryAfter: error.retryAfter)
        }
    }
}
