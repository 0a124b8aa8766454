import AgentIPC
import AuthCore
import FoundationEssentials
import Logging
import Synchronization

/// How a consent question ended for one waiting request.
enum ConsentAnswer: Sendable, Equatable {
    case allowed, denied, timedOut
    /// This request went away (its task was cancelled) before an answer came.
    case withdrawn
}

/// Why a request that would ask was refused without a question (``AccessGate/enqueue(_:account:client:)``): the
/// bounds on what one program may make the user see.
struct HeldQuestion: Error {
    /// The audit record's reason: `tooManyQuestions` or `askedRecently`.
    var reason: AccessPolicy.Reason
    var error: WireError
}

/// First-use consent: pending questions, their answers and time limit, and the remembered decisions.
extension AccessGate {
    /// At most this many questions of one client (``ClientIdentity/consentKey``: one app, host or program, whatever
    /// its instances, sessions or processes, since an app can start more of those) are open at once; a request
    /// that would open another is refused at once, not queued.
    public static let maxOpenQuestions = 3
    /// After a question about (account, client) was denied or timed out, that pair is not asked about again for
    /// this long: its requests are refused at once, saying when it may ask again.
    public static let askAgainAfter: Duration = .seconds(60)

    /// The pending question for (account, client) of the caller's run (``ClientIdentity/runKey``), joined if one is
    /// already open (several requests of one program share one question; two instances of an app or two ssh
    /// sessions of a host get one each, so that "allow this run" allows the run it names), else a new one with its
    /// time limit running and the prompter told. A new question is refused (``HeldQuestion``) while the client has
    /// ``maxOpenQuestions`` open, or within ``askAgainAfter`` of its last unanswered or denied one for the account.
    /// The caller must then ``wait(_:account:client:run:)`` for it (which counts it out again if it is cancelled).
    /// `previousHostKey`: a forwarded host's key it was allowed under before (``previousHostKey(of:account:)``),
    /// which the question shows.
    func enqueue(_ caller: Caller, account: String, client: String, previousHostKey: String? = nil) -> Result<Int, HeldQuestion> {
        let runKey = caller.identity.runKey
        let (outcome, prompter) = lock.withLock { _ -> (Result<(id: Int, isNew: Bool), HeldQuestion>, (any ConsentPrompter)?) in
            if let open = pending.values.first(where: {
                $0.request.account == account && ClientRule.sameBytes($0.request.client, client) && AccessGate.sameRun($0.runKey, runKey)
            }) {
                pending[open.request.id]!.members += 1
                return (.success((open.request.id, false)), nil)
            }
            let at = clock()
            let key = DecisionKey(account: account, client: client)
            if let until = quietUntil[key] {
                if until > at {
                    return (.failure(asksAgainLater(caller, account: account, in: until - at)), nil)
                }
                quietUntil[key] = nil
            }
            let open = pending.values.filter { ClientRule.sameBytes($0.request.client, client) }.count
            guard open < AccessGate.maxOpenQuestions else {
                return (.failure(tooManyQuestions(caller, account: account, client: client)), nil)
            }
            nextPendingID += 1
            let id = nextPendingID
            let request = PendingConsent(id: id, account: account, client: client, caller: caller.wire,
                                         since: now(), expiresIn: Int(consentTimeout.components.seconds),
                                         run: caller.identity.runDescription,
                                         appName: caller.identity.flatpakAppID.flatMap { FlatpakDisplayName.lookup($0) },
                                         previousHostKey: previousHostKey)
            let (timeout, sleep) = (consentTimeout, self.sleep)
            // Started under the lock, so whoever sees the question can also stop its timer.
            let timer = Task { [weak self] in
                await sleep(timeout)
                self?.settle(id, allow: nil)
            }
            pending[id] = Pending(request: request, runKey: runKey, requesterPID: caller.pid,
                                  deadline: at + consentTimeout, timer: timer)
            return (.success((id, true)), self.prompter)
        }
        let id: Int, isNew: Bool
        switch outcome {
        case .success(let asked): (id, isNew) = asked
        case .failure(let held):
            logger.notice("refused a request without asking the user", metadata: [
                "account": "\(account)", "peer_client": "\(client)", "reason": "\(held.reason.rawValue)"])
            return .failure(held)
        }
        if isNew {
            logger.notice("asking the user whether a program may get tokens",
                          metadata: ["account": "\(account)", "peer_client": "\(client)", "request": "\(id)"])
            if let prompter, let request = lock.withLock({ _ in pending[id]?.request }) { prompter.ask(request) }
        }
        return .success(id)
    }

    /// The host key a forwarded caller's host was allowed under before for `account`, when that is not the key it
    /// presents now (``previousHostKey(of:account:in:)`` over the remembered decisions); nil for other callers.
    func previousHostKey(of identity: ClientIdentity, account: String) -> String? {
        guard case .forwarded(let host) = identity.kind else { return nil }
        return lock.withLock { _ in AccessGate.previousHostKey(of: host, account: account, in: decisions.values) }
    }

    /// The key of the newest remembered approval, for `account`, of `host` under another key than the one it presents:
    /// a decision `ssh:NAME@KEY` that pins the host (as typed, or as ssh checks its key) to another key, read as an
    /// `allowed_clients` entry is (``ClientRule/pinnedOtherKey(for:)``). A host whose key changed is a new client,
    /// asked about again (``ClientIdentity/consentKey``); this is what lets the question say so. Nil when the host
    /// was never allowed under another key.
    static func previousHostKey(of host: ClientIdentity.ForwardedHost, account: String,
                                in decisions: some Sequence<ConsentStore.Decision>) -> String? {
        var newest: (time: Int, key: String)?
        for decision in decisions where decision.allowed && ClientRule.sameBytes(decision.account, account) {
            guard case .success(let rule) = ClientRule.parse(decision.client), let key = rule.pinnedOtherKey(for: host) else { continue }
            if newest.map({ decision.time > $0.time }) ?? true { newest = (decision.time, key) }
        }
        return newest?.key
    }

    /// Two run keys name the same run (both none, or the same bytes).
    static func sameRun(_ a: String?, _ b: String?) -> Bool {
        guard let b else { return a == nil }
        return ClientRule.sameBytes(a, b)
    }

    private func tooManyQuestions(_ caller: Caller, account: String, client: String) -> HeldQuestion {
        HeldQuestion(reason: .tooManyQuestions, error: WireError(.accessDenied,
            "account '\(account)' did not ask about \(caller.described(withPID: !caller.identity.isConfined)): \(client) already has \(AccessGate.maxOpenQuestions) questions waiting for an answer, the most one program may have at once; answer them (`authctl pending`), or ask again once they end"))
    }

    private func asksAgainLater(_ caller: Caller, account: String, in wait: Duration) -> HeldQuestion {
        // Rounded up: asking again after this many seconds finds the pair free.
        let seconds = max(1, Int(wait.components.seconds) + (wait.components.attoseconds > 0 ? 1 : 0))
        return HeldQuestion(reason: .askedRecently, error: WireError(.accessDenied,
            "account '\(account)' does not serve \(caller.described(withPID: !caller.identity.isConfined)) now: its last question about this account was denied or not answered, so it may ask again in \(seconds) s",
            retryAfter: seconds))
    }

    /// Waits for the answer to question `id`. Cancelling the waiting task (its client hung up or left the bus)
    /// ends the wait at once with `.withdrawn`; when no other request waits for the question, the question itself
    /// is withdrawn: taken off `pending` and the prompter, its timer stopped, and a later approve or deny of it is
    /// refused as unknown, so nothing is remembered for a question nobody waits for.
    func wait(_ id: Int, account: String, client: String, run: String?) async -> ConsentAnswer {
        let waiter = lock.withLock { _ -> Int in
            nextWaiterID += 1
            return nextWaiterID
        }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let (settled, withdrawn) = lock.withLock { _ -> (ConsentAnswer?, Pending?) in
                    guard pending[id] != nil else {
                        // Answered before we got here: the remembered decision is the answer, or this run's
                        // approval; none means it timed out.
                        let remembered = decisions[DecisionKey(account: account, client: client)]?.allowed
                            ?? run.flatMap { runsAllowed.contains(DecisionKey(account: account, client: $0)) ? true : nil }
                        return (remembered.map { $0 ? .allowed : .denied } ?? .timedOut, nil)
                    }
                    // Cancelled before it could wait (the handler below found no waiter to take out).
                    if Task.isCancelled { return (.withdrawn, departLocked(id)) }
                    pending[id]!.waiters[waiter] = continuation
                    return (nil, nil)
                }
                if let withdrawn { withdrawQuestion(withdrawn) }
                if let settled { continuation.resume(returning: settled) }
            }
        } onCancel: {
            let (continuation, withdrawn) = lock.withLock { _ -> (CheckedContinuation<ConsentAnswer, Never>?, Pending?) in
                guard let continuation = pending[id]?.waiters.removeValue(forKey: waiter) else { return (nil, nil) }
                return (continuation, departLocked(id))
            }
            if let withdrawn { withdrawQuestion(withdrawn) }
            continuation?.resume(returning: .withdrawn)
        }
    }

    /// A member of question `id` went away; returns the question when that was the last one (it is removed).
    /// Must run under `lock`.
    private func departLocked(_ id: Int) -> Pending? {
        guard pending[id] != nil else { return nil }
        pending[id]!.members -= 1
        guard pending[id]!.members <= 0 else { return nil }
        return pending.removeValue(forKey: id)
    }

    /// Takes a question nobody waits for any more off the prompter and stops its timer.
    private func withdrawQuestion(_ question: Pending) {
        question.timer?.cancel()
        let prompter = lock.withLock { _ in self.prompter }
        prompter?.withdraw(question.request.id)
        logger.notice("withdrew a consent question: every request waiting for it went away",
                      metadata: ["account": "\(question.request.account)", "peer_client": "\(question.request.client)",
                                 "request": "\(question.request.id)"])
    }

    /// Answers question `id` from the user (`authctl approve`/`deny`, or the notification's action when
    /// `approver` is nil). Refused from a caller without a controlling terminal (a background program must not
    /// approve itself), or from the very process that asked. Returns what was decided. `thisRun` allows the asking
    /// caller's run only (its Flatpak instance or ssh session), in memory: it is asked again in its next run.
    public func answer(_ id: Int, allow: Bool, thisRun: Bool = false, approver: Caller?) throws(WireError) -> ConsentResult {
        let checked = lock.withLock { _ -> Result<PendingConsent, WireError> in
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
            if thisRun {
                guard allow else { return .failure(WireError(.badRequest, "only an approval can be for this run; a denial is remembered")) }
                guard let runKey = open.runKey else {
                    return .failure(WireError(.badRequest,
                        "request \(id) has no run to allow (\(open.request.client) is no Flatpak instance or ssh session); approve it always, or deny it"))
                }
                // Before the waiters hear the answer: their next request finds it.
                runsAllowed.insert(DecisionKey(account: open.request.account, client: runKey))
            }
            return .success(open.request)
        }
        let request = try checked.get()
        settle(id, allow: thisRun ? nil : allow, answer: thisRun ? .allowed : nil)
        logger.notice(thisRun ? "the user allowed a program for this run" : allow ? "the user allowed a program" : "the user denied a program",
                      metadata: ["account": "\(request.account)", "peer_client": "\(request.client)", "request": "\(id)",
                                 "via": "\(approver.map { "\($0.via)" } ?? "notification")"])
        return ConsentResult(id: id, account: request.account, client: request.client, allowed: allow,
                             thisRun: thisRun ? true : nil)
    }

    /// Ends question `id`: a decision is remembered (and saved) before the waiters hear it, and ends the client's
    /// questions for the account in its other runs too (it holds for every run); a timeout (`allow` nil)
    /// remembers nothing, nor does an answer given as `answer` (allowed for this run, kept by the caller). A denial
    /// or a timeout holds the (account, client) for ``askAgainAfter``. A second settle of the same id does nothing.
    func settle(_ id: Int, allow: Bool?, answer given: ConsentAnswer? = nil) {
        let (ended, snapshot, prompter) = lock.withLock { _ -> ([Pending], [ConsentStore.Decision]?, (any ConsentPrompter)?) in
            guard let open = pending.removeValue(forKey: id) else { return ([], nil, nil) }
            let key = DecisionKey(account: open.request.account, client: open.request.client)
            if given == nil, allow != true {
                let at = clock()
                quietUntil = quietUntil.filter { $0.value > at }
                quietUntil[key] = at + AccessGate.askAgainAfter
            }
            guard let allow else { return ([open], nil, self.prompter) }
            decisions[key] = ConsentStore.Decision(account: key.account, client: key.client, allowed: allow, time: now())
            let others = pending.values.filter {
                $0.request.account == key.account && ClientRule.sameBytes($0.request.client, key.client)
            }.map(\.request.id)
            return ([open] + others.compactMap { pending.removeValue(forKey: $0) }, sortedDecisions(), self.prompter)
        }
        guard !ended.isEmpty else { return }
        if let snapshot, let problem = store.save(snapshot) {
            logger.warning("cannot save the consent decision; it holds until the agent stops", metadata: ["error": "\(problem)"])
        }
        let answer: ConsentAnswer = given ?? allow.map { $0 ? .allowed : .denied } ?? .timedOut
        for question in ended {
            question.timer?.cancel()
            prompter?.withdraw(question.request.id)
            for waiter in question.waiters.values { waiter.resume(returning: answer) }
        }
    }

    /// The questions waiting for an answer, oldest first, with the seconds each has left.
    public func pendingRequests() -> [PendingConsent] {
        let at = clock()
        return lock.withLock { _ in
            pending.values.sorted { $0.request.id < $1.request.id }.map { open in
                var request = open.request
                request.expiresIn = max(0, Int((open.deadline - at).components.seconds))
                return request
            }
        }
    }

    /// Whether `forget --client client` names the remembered client `key`: the same bytes, or for a host named
    /// without a key (`ssh:build-box`), that host under every key (`ssh:build-box@SHA256:...`). `run` (a "this run"
    /// key, `CLIENT#RUN`): the same, for the client part.
    static func forgets(_ key: String, client: String, run: Bool = false) -> Bool {
        let client = run ? client + "#" : client
        if run ? key.utf8.starts(with: client.utf8) : ClientRule.sameBytes(key, client) { return true }
        guard client.hasPrefix("ssh:"), !client.contains("@") else { return false }
        let host = run ? String(client.dropLast()) : client
        return key.utf8.starts(with: (host + "@").utf8)
    }

    /// Drops remembered decisions (all, one account's, one client's, or one pair), saving the rest; taken only from
    /// a caller with a terminal, like approve. A host named without a key is forgotten under every key.
    public func forget(account: String?, client: String?, by caller: Caller) throws(WireError) -> [ConsentStore.Decision] {
        guard caller.hasTerminal, caller.isStillConnectedProcess else {
            throw WireError(.permissionDenied, "forget is taken only from a program run in a terminal (authctl)")
        }
        let (removed, snapshot) = lock.withLock { _ -> ([ConsentStore.Decision], [ConsentStore.Decision]) in
            let matching = decisions.filter { key, _ in
                (account == nil || key.account == account) && (client.map { AccessGate.forgets(key.client, client: $0) } ?? true)
            }
            for key in matching.keys { decisions[key] = nil }
            // So is a pair held after a denial or timeout (``askAgainAfter``).
            quietUntil = quietUntil.filter { key, _ in
                !((account == nil || key.account == account) && (client.map { AccessGate.forgets(key.client, client: $0) } ?? true))
            }
            // "This run" answers of the same (account, client) go too: forget means ask again.
            runsAllowed = runsAllowed.filter { key in
                !((account == nil || key.account == account)
                  && (client.map { AccessGate.forgets(key.client, client: $0, run: true) } ?? true))
            }
            return (matching.values.sorted { ($0.account, $0.client) < ($1.account, $1.client) }, sortedDecisions())
        }
        if !removed.isEmpty, let problem = store.save(snapshot) {
            logger.warning("cannot save the consent decisions", metadata: ["error": "\(problem)"])
        }
        return removed
    }

    /// Run `run` ended (a forward session closed): its "allow this run" answers go, as nothing can ask in it again.
    public func endRun(_ run: String) {
        let suffix = "#" + run
        lock.withLock { _ in runsAllowed = runsAllowed.filter { !$0.client.utf8.reversed().starts(with: suffix.utf8.reversed()) } }
    }

    /// Sets where questions are shown (the D-Bus front end, once it has a bus).
    public func setPrompter(_ prompter: (any ConsentPrompter)?) {
        lock.withLock { _ in self.prompter = prompter }
    }

    /// Must run under `lock`.
    private func sortedDecisions() -> [ConsentStore.Decision] {
        decisions.values.sorted { ($0.account, $0.client) < ($1.account, $1.client) }
    }
}
