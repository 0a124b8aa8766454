import AgentAccess
import AgentIPC
import AuthCore
import FoundationEssentials
import Logging

/// `authctl forward`: sessions that forward the agent to another host over ssh (``ForwardSessions``).
extension AgentOperations {

    /// `forward`: opens a session for `host` (``ForwardSessions/open(host:owner:directory:)``), says where its socket
    /// is through `opened`, and holds it until the request is cancelled (its client went away) or the session is
    /// stopped; then closes it.
    public func forward(_ request: WireRequest, caller: Caller,
                        opened: @Sendable (WireEvent) async -> Void) async throws(WireError) -> ForwardResult {
        guard let host = request.host, !host.isEmpty else { throw WireError(.badRequest, "the 'forward' request needs a 'host'") }
        let directory = String(info.socketPath[..<(info.socketPath.lastIndex(of: "/") ?? info.socketPath.startIndex)])
        let (session, stopped) = try forwards.open(host: host, alias: request.alias, owner: caller, directory: directory)
        logger.notice("forward opened", metadata: ["host": "\(host)", "host_alias": "\(session.alias ?? "")", "peer_pid": "\(caller.pid)"])
        defer {
            forwards.close(session.id)
            access.endRun(session.id)
            logger.notice("forward closed", metadata: ["host": "\(host)"])
        }
        await opened(WireEvent(type: WireEvent.forwardOpen) { $0.session = session.id; $0.socket = session.socketPath })
        for await _ in stopped {}
        return ForwardResult(host: session.shownName, ended: Task.isCancelled ? "closed" : "stopped")
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

    /// `forward_stop`: ends the sessions for `host` (as typed, or as ssh checks its key) now. Tokens already handed out stay valid until they expire.
    public func stopForward(_ request: WireRequest) throws(WireError) -> ForwardChangeResult {
        guard let host = request.host, !host.isEmpty else { throw WireError(.badRequest, "'forward_stop' needs a 'host'") }
        let stopped = forwards.stop(host: host)
        if !stopped.isEmpty { logger.notice("forward stopped", metadata: ["host": "\(host)", "sessions": "\(stopped.count)"]) }
        return ForwardChangeResult(stopped: stopped.map(\.shownName))
    }

    /// The open sessions as `status` shows them; nil when there are none (the member is then absent).
    func forwardSummaries() -> [StatusResult.Forward]? {
        let sessions = forwards.list()
        guard !sessions.isEmpty else { return nil }
        return sessions.map {
            StatusResult.Forward(host: $0.host, alias: $0.alias, hostKey: $0.fingerprint, sshPID: $0.sshPID.map(Int.init),
                                 since: Int($0.opened.timeIntervalSince1970))
        }
    }
}
