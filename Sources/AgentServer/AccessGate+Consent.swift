import AgentIPC
import AuthCore
import Foundation

/// First-use consent: pending questions, their answers and time limit, and the remembered decisions.
extension AccessGate {
    /// The pending question for (account, client), joined if one is already open (several requests of one program
    /// share one question), else a new one with its time limit running and the prompter told.
    func enqueue(_ caller: Caller, account: String, client: String) -> Int {
        let (id, isNew, prompter) = lock.withLock { () -> (Int, Bool, (any ConsentPrompter)?) in
            if let open = pending.values.first(where: { $0.request.account == account && $0.request.client == client }) {
                return (open.request.id, false, nil)
            }
            nextPendingID += 1
            let request = PendingConsent(id: nextPendingID, account: account, client: client, caller: caller.wire,
                                         since: now(), expiresIn: Int(consentTimeout.components.seconds))
            pending[nextPendingID] = Pending(request: request, requesterPID: caller.pid,
                                             deadline: ContinuousClock.now + consentTimeout)
            return (nextPendingID, true, self.prompter)
        }
        if isNew {
            logger.notice("asking the user whether a program may get tokens",
                          metadata: ["account": "\(account)", "peer_client": "\(client)", "request": "\(id)"])
            if let prompter, let request = lock.withLock({ pending[id]?.request }) { prompter.ask(request) }
            let timeout = consentTimeout
            let sleep = self.sleep
            Task { [weak self] in
                await sleep(timeout)
                self?.settle(id, allow: nil)
            }
        }
        return id
    }

    /// Waits for the answer to question `id`: true allowed, false denied, nil timed out.
    func wait(_ id: Int, account: String, client: String) async -> Bool? {
        await withCheckedContinuation { continuation in
            let settled: Bool?? = lock.withLock {
                if pending[id] != nil {
                    pending[id]!.waiters.append(continuation)
                    return .none
                }
                // Answered before we got here: the remembered decision is the answer; none means it timed out.
                return .some(decisions[DecisionKey(account: account, client: client)]?.allowed)
            }
            if case .some(let answer) = settled { continuation.resume(returning: answer) }
        }
    }

    /// Answers question `id` from the user (`authctl approve`/`deny`, or the notification's action when
    /// `approver` is nil). Refused from a caller without a controlling terminal (a background program must not
    /// approve itself), or from the very process that asked. Returns what was decided.
    public func answer(_ id: Int, allow: Bool, approver: Caller?) throws(WireError) -> ConsentResult {
        let checked = lock.withLock { () -> Result<PendingConsent, WireError> in
            guard let open = pending[id] else {
                return .failure(WireError(.badRequest, "no pending request \(id); see `authctl pending`"))
            }
            if let approver {
                guard approver.hasTerminal, approver.isStillConnectedProcess else {
                    return .failure(WireError(.permissionDenied,
                        "approve and deny are taken only from a program run in a terminal (authctl), not from a background process"))
                }
                guard approver.pid != open.requesterPID else {
                    return .failure(WireError(.permissionDenied, "a program cannot answer its own request"))
                }
            }
            return .success(open.request)
        }
        let request = try checked.get()
        settle(id, allow: allow)
        logger.notice(allow ? "the user allowed a program" : "the user denied a program",
                      metadata: ["account": "\(request.account)", "peer_client": "\(request.client)", "request": "\(id)",
                                 "via": "\(approver.map { "\($0.via)" } ?? "notification")"])
        return ConsentResult(id: id, account: request.account, client: request.client, allowed: allow)
    }

    /// Ends question `id`: a decision is remembered (and saved) before the waiters hear it; a timeout (`allow`
    /// nil) remembers nothing. A second settle of the same id does nothing.
    func settle(_ id: Int, allow: Bool?) {
        let (ended, snapshot, prompter) = lock.withLock { () -> (Pending?, [ConsentStore.Decision]?, (any ConsentPrompter)?) in
            guard let open = pending.removeValue(forKey: id) else { return (nil, nil, nil) }
            guard let allow else { return (open, nil, self.prompter) }
            let key = DecisionKey(account: open.request.account, client: open.request.client)
            decisions[key] = ConsentStore.Decision(account: key.account, client: key.client, allowed: allow, time: now())
            return (open, sortedDecisions(), self.prompter)
        }
        guard let ended else { return }
        if let snapshot, let problem = store.save(snapshot) {
            logger.warning("cannot save the consent decision; it holds until the agent stops", metadata: ["error": "\(problem)"])
        }
        prompter?.withdraw(id)
        for waiter in ended.waiters { waiter.resume(returning: allow) }
    }

    /// The questions waiting for an answer, oldest first, with the seconds each has left.
    public func pendingRequests() -> [PendingConsent] {
        let at = ContinuousClock.now
        return lock.withLock {
            pending.values.sorted { $0.request.id < $1.request.id }.map { open in
                var request = open.request
                request.expiresIn = max(0, Int((open.deadline - at).components.seconds))
                return request
            }
        }
    }

    /// Drops remembered decisions (all, one account's, one client's, or one pair), saving the rest; taken only from
    /// a caller with a terminal, like approve.
    public func forget(account: String?, client: String?, by caller: Caller) throws(WireError) -> [ConsentStore.Decision] {
        guard caller.hasTerminal, caller.isStillConnectedProcess else {
            throw WireError(.permissionDenied, "forget is taken only from a program run in a terminal (authctl)")
        }
        let (removed, snapshot) = lock.withLock { () -> ([ConsentStore.Decision], [ConsentStore.Decision]) in
            let matching = decisions.filter { key, _ in
                (account == nil || key.account == account) && (client == nil || key.client == client)
            }
            for key in matching.keys { decisions[key] = nil }
            return (matching.values.sorted { ($0.account, $0.client) < ($1.account, $1.client) }, sortedDecisions())
        }
        if !removed.isEmpty, let problem = store.save(snapshot) {
            logger.warning("cannot save the consent decisions", metadata: ["error": "\(problem)"])
        }
        return removed
    }

    /// Sets where questions are shown (the D-Bus front end, once it has a bus).
    public func setPrompter(_ prompter: (any ConsentPrompter)?) {
        lock.withLock { self.prompter = prompter }
    }

    /// Must run under `lock`.
    private func sortedDecisions() -> [ConsentStore.Decision] {
        decisions.values.sorted { ($0.account, $0.client) < ($1.account, $1.client) }
    }
}
