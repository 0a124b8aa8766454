import AgentIPC
@testable import AgentAccess
import AuthCore
import Foundation
import Logging
import XCTest

/// The access gate with real processes as callers (children of the test), a real consent file, and injected time
/// limits: nothing sleeps for a consent timeout.
final class AccessGateTests: ChildProcessTestCase {
    /// A real process running `/usr/bin/sleep`, identified the way the socket server identifies a peer.
    func spawnCaller() throws -> (Process, Caller) {
        let child = try spawn("/usr/bin/sleep", ["60"])
        let caller = Caller.identify(peer: PeerCredentials(pid: child.processIdentifier, uid: getuid(), gid: getgid()), via: "socket")
        return (child, caller)
    }

    /// This test process, with a terminal (as `authctl approve` run by a person would have).
    func approver() throws -> Caller {
        var me = Caller.identify(peer: PeerCredentials(pid: getpid(), uid: getuid(), gid: getgid()), via: "socket")
        XCTAssertTrue(me.isStillConnectedProcess)
        me.hasTerminal = true
        return me
    }

    func gate(_ policy: AccessPolicy, store: ConsentStore? = nil, sleep: @escaping @Sendable (Duration) async -> Void = { _ in
        try? await Task.sleep(for: .seconds(3600))
    }) -> AccessGate {
        AccessGate(policies: ["work": policy], consentTimeout: .seconds(7), store: store ?? ConsentStore(path: nil),
                   auditCapacity: 100, logger: Logger(label: "test"), now: { 1_700_000_000 }, sleep: sleep)
    }

    func testIdentifyReadsTheRealExecutableAndPinsTheProcess() throws {
        let (_, caller) = try spawnCaller()
        XCTAssertEqual(caller.identity.exe, "/usr/bin/sleep")
        XCTAssertFalse(caller.identity.exeDeleted)
        XCTAssertNil(caller.identity.flatpakAppID)
        XCTAssertTrue(caller.isStillConnectedProcess)
        XCTAssertEqual(caller.identity.consentKey, "/usr/bin/sleep")
    }

    func testACopiedBinaryIsAnotherIdentityAndADeletedOneIsUnidentified() throws {
        let copy = directory.appendingPathComponent("sleep-copy").path
        try FileManager.default.copyItem(atPath: "/usr/bin/sleep", toPath: copy)
        let child = try spawn(copy, ["60"])
        let peer = PeerCredentials(pid: child.processIdentifier, uid: getuid(), gid: getgid())
        let caller = Caller.identify(peer: peer, via: "socket")
        XCTAssertEqual(caller.identity.exe, copy)
        let listed = gate(AccessPolicy(allowedClients: [.path("/usr/bin/sleep")]))
        XCTAssertEqual(listed.verdict(caller, account: "work"), .deny(.notListed))

        // Replace the file under the running process: the path no longer names what runs.
        try FileManager.default.removeItem(atPath: copy)
        try FileManager.default.copyItem(atPath: "/usr/bin/true", toPath: copy)
        let replaced = Caller.identify(peer: peer, via: "socket")
        XCTAssertEqual(replaced.identity.exe, copy)
        XCTAssertTrue(replaced.identity.exeDeleted)
        let copyListed = gate(AccessPolicy(allowedClients: [.path(copy)], confirm: .firstUse))
        XCTAssertEqual(copyListed.verdict(replaced, account: "work"), .deny(.unidentified), "a replaced binary must not match its old path")
        XCTAssertEqual(copyListed.verdict(caller, account: "work"), .grant(.listed), "the identity read at connect time stands")
    }

    func testAnExitedOrRecycledPidIsRefusedUnderAPolicy() throws {
        let (child, caller) = try spawnCaller()
        let listed = gate(AccessPolicy(allowedClients: [.path("/usr/bin/sleep")]))
        XCTAssertEqual(listed.verdict(caller, account: "work"), .grant(.listed))
        child.terminate()
        child.waitUntilExit()
        XCTAssertFalse(caller.isStillConnectedProcess)
        XCTAssertEqual(listed.verdict(caller, account: "work"), .deny(.processExited))

        // A pid now used by another process (simulated: our own pid with the start time of an older process).
        var recycled = try approver()
        let start = try XCTUnwrap(recycled.process?.startTime)
        recycled.process = ProcessPin(pid: getpid(), startTime: start - 1)
        XCTAssertFalse(recycled.isStillConnectedProcess)
        XCTAssertEqual(gate(AccessPolicy(confirm: .firstUse)).verdict(recycled, account: "work"), .deny(.processExited))
        // Without a policy nothing changes (today's behaviour): the check is only made where identity matters.
        XCTAssertEqual(gate(.open).verdict(recycled, account: "work"), .grant(.open))
    }

    func testConsentApprovedIsRememberedAcrossRestarts() async throws {
        let (_, caller) = try spawnCaller()
        let store = ConsentStore(path: directory.appendingPathComponent("state/auth-agent/consent.json").path)
        let first = gate(AccessPolicy(confirm: .firstUse), store: store)
        let events = EventBox()
        let waiting = Task {
            try await first.authorize(caller, account: "work", scopes: ["read"], resource: nil) { await events.add($0) }
        }
        let pending = try await waitForPending(first)
        XCTAssertEqual(pending.client, "/usr/bin/sleep")
        XCTAssertEqual(pending.caller.pid, caller.pid)

        // The caller itself (even with a terminal), or a program without a terminal, cannot answer.
        var itself = caller
        itself.hasTerminal = true
        XCTAssertThrowsError(try first.answer(pending.id, allow: true, approver: itself))
        var background = try approver()
        background.hasTerminal = false
        XCTAssertThrowsError(try first.answer(pending.id, allow: true, approver: background))
        XCTAssertEqual(try first.answer(pending.id, allow: true, approver: try approver()).allowed, true)
        let reason = try await waiting.value.reason
        XCTAssertEqual(reason, .approved)
        let announced = await events.all
        XCTAssertEqual(announced.map(\.type), [WireEvent.consentRequired])
        XCTAssertEqual(announced.first?.request, pending.id)
        XCTAssertEqual(first.pendingRequests(), [])

        // Saved 0600, and a new agent (a restart) knows the decision without asking.
        var info = stat()
        XCTAssertEqual(stat(store.path!, &info), 0)
        XCTAssertEqual(info.st_mode & 0o777, 0o600)
        let restarted = gate(AccessPolicy(confirm: .firstUse), store: store)
        XCTAssertEqual(restarted.verdict(caller, account: "work"), .grant(.approved))

        // Forget needs a terminal too, then the caller is asked again.
        var noTerminal = caller
        noTerminal.hasTerminal = false
        XCTAssertThrowsError(try restarted.forget(account: "work", client: nil, by: noTerminal))
        XCTAssertEqual(try restarted.forget(account: "work", client: nil, by: try approver()).map(\.client), ["/usr/bin/sleep"])
        XCTAssertEqual(restarted.verdict(caller, account: "work"), .ask)
        XCTAssertEqual(gate(AccessPolicy(confirm: .firstUse), store: store).verdict(caller, account: "work"), .ask)
    }

    func testConsentDeniedAndTimedOutAreRefusedAndAudited() async throws {
        let (_, caller) = try spawnCaller()
        let denying = gate(AccessPolicy(confirm: .firstUse))
        let waiting = Task { try await denying.authorize(caller, account: "work", scopes: nil, resource: nil) { _ in } }
        let pending = try await waitForPending(denying)
        _ = try denying.answer(pending.id, allow: false, approver: try approver())
        do {
            _ = try await waiting.value
            XCTFail("a denied request must be refused")
        } catch let error as WireError {
            XCTAssertEqual(error.knownCode, .accessDenied)
            XCTAssertTrue(error.message.contains("/usr/bin/sleep") && error.message.contains("authctl forget"), error.message)
        }
        XCTAssertEqual(denying.verdict(caller, account: "work"), .deny(.deniedByUser))

        // The time limit passes at once (injected): refused, nothing remembered.
        let impatient = gate(AccessPolicy(confirm: .firstUse), sleep: { _ in })
        do {
            _ = try await impatient.authorize(caller, account: "work", scopes: nil, resource: "https://api.example/") { _ in }
            XCTFail("a timed-out request must be refused")
        } catch let error as WireError {
            XCTAssertEqual(error.knownCode, .accessDenied)
            XCTAssertTrue(error.message.contains("authctl approve"), error.message)
        }
        XCTAssertEqual(impatient.verdict(caller, account: "work"), .ask, "a timeout is not a decision")
        let records = impatient.audit.entries()
        XCTAssertEqual(records.map(\.reason), ["consent_timeout"])
        XCTAssertEqual(records.first?.outcome, AuditEntry.denied)
        XCTAssertEqual(records.first?.resource, "https://api.example/")
        XCTAssertEqual(denying.audit.entries().map(\.reason), ["denied_by_user"])
    }

    func testSeveralRequestsOfOneProgramShareOneQuestion() async throws {
        let (_, caller) = try spawnCaller()
        let asking = gate(AccessPolicy(confirm: .firstUse))
        let a = Task { try await asking.authorize(caller, account: "work", scopes: nil, resource: nil) { _ in } }
        let b = Task { try await asking.authorize(caller, account: "work", scopes: nil, resource: nil) { _ in } }
        let pending = try await waitForPending(asking)
        XCTAssertEqual(asking.pendingRequests().count, 1)
        _ = try asking.answer(pending.id, allow: true, approver: try approver())
        let first = try await a.value.reason
        let second = try await b.value.reason
        XCTAssertEqual([first, second], [.approved, .approved])
    }

    /// Issue 46 ("allow this run") and 45: an answer for the asking caller's run (an ssh forward session here; a
    /// Flatpak instance the same way) serves that run only, in memory: the next run is asked again, nothing is saved.
    func testAllowThisRunServesThatRunOnlyAndIsNotRemembered() async throws {
        let (_, local) = try spawnCaller()
        var host = local
        let key = "SHA256:" + String(repeating: "A", count: 43)
        host.identity.kind = .forwarded(.init(name: "build-box", fingerprint: key, session: "session-1"))
        var nextSession = host
        nextSession.identity.kind = .forwarded(.init(name: "build-box", fingerprint: key, session: "session-2"))
        let asking = gate(AccessPolicy(confirm: .firstUse))

        // A program of this computer has no run: "this run" is refused, and the question stays open.
        let plain = Task { try await asking.authorize(local, account: "work", scopes: nil, resource: nil) { _ in } }
        let plainPending = try await waitForPending(asking)
        XCTAssertNil(plainPending.run)
        XCTAssertThrowsError(try asking.answer(plainPending.id, allow: true, thisRun: true, approver: try approver()))
        _ = try asking.answer(plainPending.id, allow: false, approver: try approver())
        _ = try? await plain.value

        let asker = host
        let waiting = Task { try await asking.authorize(asker, account: "work", scopes: nil, resource: nil) { _ in } }
        let pending = try await waitForPending(asking)
        XCTAssertEqual(pending.run, "this ssh session")
        XCTAssertThrowsError(try asking.answer(pending.id, allow: false, thisRun: true, approver: try approver()),
                             "a denial is never for one run")
        let result = try asking.answer(pending.id, allow: true, thisRun: true, approver: try approver())
        XCTAssertEqual(result.thisRun, true)
        let reason = try await waiting.value.reason
        XCTAssertEqual(reason, .approved)
        XCTAssertEqual(asking.verdict(host, account: "work"), .grant(.approved), "the same run is served")
        XCTAssertEqual(asking.verdict(nextSession, account: "work"), .ask, "the next run is asked again")
        asking.endRun("session-2")
        XCTAssertEqual(asking.verdict(host, account: "work"), .grant(.approved), "another run's end changes nothing")
        asking.endRun("session-1")
        XCTAssertEqual(asking.verdict(host, account: "work"), .ask, "an ended run's answer is gone")
        let again = try await { () async throws -> ConsentResult in
            let waiting = Task { try await asking.authorize(asker, account: "work", scopes: nil, resource: nil) { _ in } }
            let pending = try await waitForPending(asking)
            let result = try asking.answer(pending.id, allow: true, thisRun: true, approver: try approver())
            _ = try await waiting.value
            return result
        }()
        XCTAssertEqual(again.thisRun, true)
        XCTAssertEqual(try asking.forget(account: "work", client: host.identity.consentKey, by: try approver()).count, 0,
                       "nothing was remembered")
        XCTAssertEqual(asking.verdict(host, account: "work"), .ask, "forget drops the run's answer too")
    }

    /// Issue 53: two runs of one client (two ssh sessions of a host here; two instances of an Flatpak app the same
    /// way) get a question each, and "allow this run" answers the run that was asked only: the other keeps waiting
    /// for its own answer. An answer for always ends the client's questions for the account in every run. Before:
    /// the second run joined the first one's question, and "this run" served both.
    func testAllowThisRunServesOnlyTheRunThatWasAsked() async throws {
        let (_, first) = try spawnCaller()
        let (_, second) = try spawnCaller()
        func host(_ caller: Caller, session: String) -> Caller {
            var host = caller
            host.identity.kind = .forwarded(.init(name: "build-box", fingerprint: "SHA256:" + String(repeating: "A", count: 43),
                                                  session: session))
            return host
        }
        let (one, two) = (host(first, session: "session-1"), host(second, session: "session-2"))
        let asking = AccessGate(policies: ["work": AccessPolicy(confirm: .firstUse), "other": AccessPolicy(confirm: .firstUse)],
                                consentTimeout: .seconds(7), logger: Logger(label: "test"), now: { 1_700_000_000 },
                                sleep: { _ in try? await Task.sleep(for: .seconds(3600)) })
        let a = Task { try await asking.authorize(one, account: "work", scopes: nil, resource: nil) { _ in } }
        _ = try await waitForPending(asking)
        let b = Task { try await asking.authorize(two, account: "work", scopes: nil, resource: nil) { _ in } }
        let questions = try await waitForPending(asking, count: 2)
        XCTAssertEqual(questions.map(\.caller.pid), [one.pid, two.pid], "each run is asked about by itself")
        _ = try asking.answer(questions[0].id, allow: true, thisRun: true, approver: try approver())
        let reason = try await a.value.reason
        XCTAssertEqual(reason, .approved)
        XCTAssertEqual(asking.pendingRequests().map(\.id), [questions[1].id], "the other run still waits for its answer")
        XCTAssertEqual(asking.verdict(two, account: "work"), .ask)
        _ = try asking.answer(questions[1].id, allow: false, approver: try approver())
        await XCTAssertThrowsAsync(try await b.value)
        XCTAssertEqual(asking.verdict(one, account: "work"), .deny(.deniedByUser), "a denial holds for every run")

        // An answer for always is for the client: its question in another run ends with the same answer.
        let c = Task { try await asking.authorize(one, account: "other", scopes: nil, resource: nil) { _ in } }
        _ = try await waitForPending(asking)
        let d = Task { try await asking.authorize(two, account: "other", scopes: nil, resource: nil) { _ in } }
        let both = try await waitForPending(asking, count: 2)
        _ = try asking.answer(both[1].id, allow: true, approver: try approver())
        let reasons = [try await c.value.reason, try await d.value.reason]
        XCTAssertEqual(reasons, [.approved, .approved])
        XCTAssertEqual(asking.pendingRequests(), [])
    }

    /// Issue 53: one client (here /usr/bin/sleep) has at most ``AccessGate/maxOpenQuestions`` questions open; a
    /// request that would open another is refused at once (audited `too_many_questions`), not queued. A request that
    /// joins an open question, and another client, are not held. Before: every request opened a question of its own.
    func testAClientHasAtMostThreeQuestionsOpen() async throws {
        let (_, caller) = try spawnCaller()
        let accounts = ["a", "b", "c", "d"]
        let asking = AccessGate(policies: Dictionary(uniqueKeysWithValues: accounts.map { ($0, AccessPolicy(confirm: .firstUse)) }),
                                consentTimeout: .seconds(7), logger: Logger(label: "test"), now: { 1_700_000_000 },
                                sleep: { _ in try? await Task.sleep(for: .seconds(3600)) })
        var waiting: [Task<(reason: AccessPolicy.Reason, caller: Caller), Error>] = []
        for account in accounts.prefix(3) {
            waiting.append(Task { try await asking.authorize(caller, account: account, scopes: nil, resource: nil) { _ in } })
            _ = try await waitForPending(asking, count: waiting.count)
        }
        let done = TimerBox()
        let fourth = Task { () -> WireError? in
            defer { done.stopped() }
            do { _ = try await asking.authorize(caller, account: "d", scopes: nil, resource: nil) { _ in } } catch let error as WireError {
                return error
            } catch {}
            return nil
        }
        for _ in 0..<1000 where done.stops == 0 && asking.pendingRequests().count <= 3 {
            try await Task.sleep(for: .milliseconds(5))
        }
        XCTAssertEqual(asking.pendingRequests().map(\.account), ["a", "b", "c"], "a fourth question was opened")
        fourth.cancel()
        let refusal = await fourth.value
        XCTAssertEqual(refusal?.knownCode, .accessDenied)
        XCTAssertTrue(refusal?.message.contains("already has 3 questions waiting") == true, refusal?.message ?? "")
        XCTAssertEqual(asking.audit.entries().map(\.reason), ["too_many_questions"])

        // Joining an open question is no new question; another client has questions of its own.
        let joined = Task { try await asking.authorize(caller, account: "a", scopes: nil, resource: nil) { _ in } }
        var other = caller
        other.identity = ClientIdentity(exe: "/usr/bin/other")
        let another = Task { try await asking.authorize(other, account: "d", scopes: nil, resource: nil) { _ in } }
        let open = try await waitForPending(asking, count: 4)
        for _ in 0..<1000 where asking.lock.withLock({ _ in asking.pending[open[0].id]?.waiters.count ?? 0 }) < 2 {
            try await Task.sleep(for: .milliseconds(5))
        }
        XCTAssertEqual(open.map(\.client), ["/usr/bin/sleep", "/usr/bin/sleep", "/usr/bin/sleep", "/usr/bin/other"])
        for question in open { _ = try asking.answer(question.id, allow: true, approver: try approver()) }
        for task in waiting + [joined, another] { _ = try await task.value }
    }

    /// Issue 53: a question that timed out (or was denied) is not asked again at once: for
    /// ``AccessGate/askAgainAfter`` the same (account, client) is refused without a question, saying when it may ask
    /// (audited `asked_recently`); then it is asked again; `forget` ends the wait. Before: asked again at once, as
    /// often as the program liked.
    func testAnUnansweredQuestionIsNotAskedAgainForAMinute() async throws {
        let (_, caller) = try spawnCaller()
        let clock = ClockBox()
        let impatient = AccessGate(policies: ["work": AccessPolicy(confirm: .firstUse)], consentTimeout: .seconds(7),
                                   logger: Logger(label: "test"), now: { 1_700_000_000 }, sleep: { _ in },
                                   clock: { clock.now })
        func ask() async -> WireError? {
            do { _ = try await impatient.authorize(caller, account: "work", scopes: nil, resource: nil) { _ in } } catch let error as WireError {
                return error
            } catch {}
            return nil
        }
        let timedOut = await ask()
        XCTAssertTrue(timedOut?.message.contains("nobody allowed it") == true, timedOut?.message ?? "served")
        let held = await ask()
        XCTAssertEqual(held?.knownCode, .accessDenied)
        XCTAssertTrue(held?.message.contains("may ask again in 60 s") == true, held?.message ?? "served")
        XCTAssertEqual(held?.retryAfter, 60)
        clock.advance(.seconds(59))
        let later = await ask()
        XCTAssertTrue(later?.message.contains("may ask again in 1 s") == true, later?.message ?? "served")
        clock.advance(.seconds(1))
        let again = await ask()
        XCTAssertTrue(again?.message.contains("nobody allowed it") == true, "asked again after the minute: \(again?.message ?? "served")")
        XCTAssertEqual(impatient.audit.entries().map(\.reason), ["consent_timeout", "asked_recently", "asked_recently", "consent_timeout"])
        _ = try impatient.forget(account: "work", client: nil, by: try approver())
        let forgotten = await ask()
        XCTAssertTrue(forgotten?.message.contains("nobody allowed it") == true, "forget means ask again: \(forgotten?.message ?? "served")")
    }

    func testACancelledWaitWithdrawsTheQuestionAndRemembersNothing() async throws {
        let (_, caller) = try spawnCaller()
        let timers = TimerBox()
        // The injected time limit never passes by itself; it records that the question's timer was stopped.
        let asking = gate(AccessPolicy(confirm: .firstUse), sleep: { _ in
            await withTaskCancellationHandler {
                try? await Task.sleep(for: .seconds(3600))
            } onCancel: { timers.stopped() }
        })
        let prompter = PrompterBox()
        asking.setPrompter(prompter)
        let waiting = Task { try await asking.authorize(caller, account: "work", scopes: ["read"], resource: nil) { _ in } }
        let pending = try await waitForPending(asking)
        for _ in 0..<1000 where prompter.asked.isEmpty { try await Task.sleep(for: .milliseconds(5)) }
        XCTAssertEqual(prompter.asked, [pending.id])

        waiting.cancel()  // what the socket server does when the client hangs up, AgentDBus when the caller leaves
        do {
            _ = try await waiting.value
            XCTFail("a withdrawn request must not be served")
        } catch let error as WireError {
            XCTAssertEqual(error.knownCode, .accessDenied)
            XCTAssertTrue(error.message.contains("withdrawn"), error.message)
        }
        XCTAssertEqual(asking.pendingRequests(), [], "`authctl pending` no longer lists a question nobody waits for")
        XCTAssertEqual(prompter.withdrawn, [pending.id], "the notification is taken away")
        XCTAssertEqual(timers.stops, 1, "its timer is stopped")
        let records = asking.audit.entries()
        XCTAssertEqual(records.map(\.outcome), [AuditEntry.withdrawn])
        XCTAssertEqual(records.map(\.reason), ["cancelled"])
        XCTAssertEqual(records.first?.scopes, ["read"])
        XCTAssertEqual(records.first?.caller.pid, caller.pid)

        // A late answer finds nothing to answer and remembers nothing.
        XCTAssertThrowsError(try asking.answer(pending.id, allow: true, approver: try approver())) { error in
            XCTAssertEqual((error as? WireError)?.knownCode, .badRequest)
        }
        XCTAssertEqual(asking.verdict(caller, account: "work"), .ask)
    }

    func testCancellingOneOfTwoWaitersKeepsTheQuestionForTheOther() async throws {
        let (_, caller) = try spawnCaller()
        let asking = gate(AccessPolicy(confirm: .firstUse))
        let a = Task { try await asking.authorize(caller, account: "work", scopes: nil, resource: nil) { _ in } }
        let pending = try await waitForPending(asking)
        let b = Task { try await asking.authorize(caller, account: "work", scopes: nil, resource: nil) { _ in } }
        // b has joined the question once a second member is counted; wait for that through the gate's own state.
        for _ in 0..<1000 where asking.lock.withLock({ _ in asking.pending[pending.id]?.waiters.count ?? 0 }) < 2 {
            try await Task.sleep(for: .milliseconds(5))
        }
        a.cancel()
        await XCTAssertThrowsAsync(try await a.value)
        XCTAssertEqual(asking.pendingRequests().map(\.id), [pending.id], "b still waits for the answer")
        _ = try asking.answer(pending.id, allow: true, approver: try approver())
        let reason = try await b.value.reason
        XCTAssertEqual(reason, .approved)
        XCTAssertEqual(asking.audit.entries().map(\.outcome), [AuditEntry.withdrawn])
    }

    func testARequestCancelledBeforeItWaitsWithdrawsItsQuestion() async throws {
        let (_, caller) = try spawnCaller()
        let asking = gate(AccessPolicy(confirm: .firstUse))
        // The client goes away while the consent_required event is being written, before the wait begins.
        let waiting = Task {
            try await asking.authorize(caller, account: "work", scopes: nil, resource: nil) { _ in
                withUnsafeCurrentTask { $0?.cancel() }
            }
        }
        await XCTAssertThrowsAsync(try await waiting.value)
        XCTAssertEqual(asking.pendingRequests(), [])
        XCTAssertEqual(asking.audit.entries().map(\.reason), ["cancelled"])
    }

    func testAuditRingKeepsTheNewestAndFilters() throws {
        let log = AuditLog(capacity: 3, logger: Logger(label: "test"))
        for (i, account) in ["a", "b", "a", "b", "a"].enumerated() {
            log.append(AuditEntry(time: 100 + i, account: account, outcome: AuditEntry.granted, reason: "open",
                                  caller: WireCaller(pid: Int32(i), via: "socket", exe: "/usr/bin/x")))
        }
        XCTAssertEqual(log.entries().map(\.time), [102, 103, 104])
        XCTAssertEqual(log.entries(account: "a").map(\.time), [102, 104])
        XCTAssertEqual(log.entries(since: 103).map(\.time), [103, 104])
    }

    func testConsentDirectoryIsThePathsParentAsNSStringGivesIt() {
        for path in ["/a/b/consent.json", "/consent.json", "/a//b/", "/a/b", "/", "relative/file", "file"] {
            XCTAssertEqual(ConsentStore.directory(of: path), (path as NSString).deletingLastPathComponent, path)
        }
    }

    func testCorruptConsentFileMeansAskingAgain() throws {
        let path = directory.appendingPathComponent("consent.json").path
        try Data("{not json".utf8).write(to: URL(fileURLWithPath: path))
        XCTAssertThrowsError(try ConsentStore(path: path).load())
        let (_, caller) = try spawnCaller()
        XCTAssertEqual(gate(AccessPolicy(confirm: .firstUse), store: ConsentStore(path: path)).verdict(caller, account: "work"), .ask)
    }

    func waitForPending(_ gate: AccessGate) async throws -> PendingConsent {
        try await waitForPending(gate, count: 1)[0]
    }

    /// The pending questions, oldest first, once there are at least `count`.
    func waitForPending(_ gate: AccessGate, count: Int) async throws -> [PendingConsent] {
        for _ in 0..<1000 {
            let open = gate.pendingRequests()
            if open.count >= count { return open }
            try await Task.sleep(for: .milliseconds(5))
        }
        struct NoPendingRequest: Error {}
        XCTFail("fewer than \(count) pending requests appeared: \(gate.pendingRequests().map(\.id))")
        throw NoPendingRequest()
    }

    /// Issue 54, item 9: `forget --client ssh:build-box` forgets that host under every key it was remembered with
    /// (decisions are keyed `ssh:HOST@SHA256:...`), and no other host. Before: it matched nothing.
    func testForgettingAHostForgetsItUnderEveryKey() throws {
        let (keyA, keyB) = ("SHA256:" + String(repeating: "A", count: 43), "SHA256:" + String(repeating: "B", count: 43))
        let store = ConsentStore(path: directory.appendingPathComponent("consent.json").path)
        XCTAssertNil(store.save([
            ConsentStore.Decision(account: "work", client: "ssh:build-box@\(keyA)", allowed: true, time: 1),
            ConsentStore.Decision(account: "work", client: "ssh:build-box@\(keyB)", allowed: false, time: 2),
            ConsentStore.Decision(account: "work", client: "ssh:build-box2@\(keyA)", allowed: true, time: 3),
            ConsentStore.Decision(account: "work", client: "/usr/bin/ssh", allowed: true, time: 4),
        ]))
        let judge = gate(AccessPolicy(confirm: .firstUse), store: store)
        let forgotten = try judge.forget(account: nil, client: "ssh:build-box", by: try approver())
        XCTAssertEqual(forgotten.map(\.client), ["ssh:build-box@\(keyA)", "ssh:build-box@\(keyB)"])
        XCTAssertEqual(try store.load().map(\.client), ["/usr/bin/ssh", "ssh:build-box2@\(keyA)"])
        XCTAssertEqual(try judge.forget(account: nil, client: "ssh:build-box2@\(keyA)", by: try approver()).count, 1,
                       "one key, named with it")
        XCTAssertTrue(AccessGate.forgets("ssh:build-box@\(keyA)#session-1", client: "ssh:build-box", run: true))
        XCTAssertFalse(AccessGate.forgets("ssh:build-box2@\(keyA)#session-1", client: "ssh:build-box", run: true))
        XCTAssertFalse(AccessGate.forgets("/usr/bin/ssh", client: "ssh:"), "ssh: alone names no host")
    }

    /// Issue 54, item 7: a host refused because its entry pins another key is told the key changed (pinned X,
    /// presented Y) and how to re-pin, not to add a looser entry. Before: `add "ssh:build-box"`.
    func testAPinnedHostWhoseKeyChangedIsToldSo() throws {
        let (keyA, keyB) = ("SHA256:" + String(repeating: "A", count: 43), "SHA256:" + String(repeating: "B", count: 43))
        var (_, host) = try spawnCaller()
        host.identity.kind = .forwarded(.init(name: "127.0.0.1:22022", alias: "build-box", fingerprint: keyB, session: "s1"))
        let pinned = gate(AccessPolicy(allowedClients: [try ClientRule.parse("ssh:build-box@\(keyA)").get()]))
        XCTAssertEqual(pinned.verdict(host, account: "work"), .deny(.notListed))
        let message = pinned.refuse(host, account: "work", reason: .notListed, scopes: nil, resource: nil).message
        XCTAssertTrue(message.contains("the host key of build-box changed"), message)
        XCTAssertTrue(message.contains("pins \(keyA), the host presented \(keyB)"), message)
        XCTAssertTrue(message.contains("\"ssh:build-box@\(keyB)\""), message)
        XCTAssertFalse(message.contains("add \"ssh:build-box\""), message)
        // Not pinned at all: the advice to add the name it goes by.
        let other = gate(AccessPolicy(allowedClients: [try ClientRule.parse("ssh:other@\(keyA)").get()]))
        let plain = other.refuse(host, account: "work", reason: .notListed, scopes: nil, resource: nil).message
        XCTAssertTrue(plain.contains("add \"ssh:build-box\""), plain)
    }

    /// Issue 54: under `confirm = "first-use"` a host whose key changed is a new client, asked about again; the
    /// question says it was allowed before under another key (which) and presents another now, in `pending` and in the
    /// event the waiting host's authctl prints. Before: the question read as a first-time host's.
    func testAHostAllowedBeforeUnderAnotherKeyIsAskedSayingItsKeyChanged() async throws {
        let (keyA, keyB, keyC) = ("SHA256:" + String(repeating: "A", count: 43), "SHA256:" + String(repeating: "B", count: 43),
                                  "SHA256:" + String(repeating: "C", count: 43))
        let store = ConsentStore(path: directory.appendingPathComponent("consent.json").path)
        XCTAssertNil(store.save([
            ConsentStore.Decision(account: "work", client: "ssh:build-box@\(keyA)", allowed: true, time: 1),
            ConsentStore.Decision(account: "work", client: "ssh:build-box@\(keyC)", allowed: false, time: 3),
            ConsentStore.Decision(account: "other", client: "ssh:build-box@\(keyC)", allowed: true, time: 4),
            ConsentStore.Decision(account: "work", client: "ssh:build-box2@\(keyC)", allowed: true, time: 5),
        ]))
        var (_, host) = try spawnCaller()
        host.identity.kind = .forwarded(.init(name: "127.0.0.1:22022", alias: "build-box", fingerprint: keyB, session: "s1"))
        let asking = gate(AccessPolicy(confirm: .firstUse), store: store)
        let events = EventBox()
        let asker = host
        let waiting = Task { try await asking.authorize(asker, account: "work", scopes: nil, resource: nil) { await events.add($0) } }
        let pending = try await waitForPending(asking)
        XCTAssertEqual(pending.client, "ssh:build-box@\(keyB)")
        XCTAssertEqual(pending.previousHostKey, keyA, "the key it was allowed under: not a denial, another account or host")
        _ = try asking.answer(pending.id, allow: true, approver: try approver())
        _ = try await waiting.value
        let announced = await events.all
        XCTAssertEqual(announced.first?.previousHostKey, keyA)

        // Under ssh's own name for it too; the newest approval under another key; none for the key it was allowed under.
        let decisions = [ConsentStore.Decision(account: "work", client: "ssh:127.0.0.1:22022@\(keyA)", allowed: true, time: 1),
                         ConsentStore.Decision(account: "work", client: "ssh:build-box@\(keyC)", allowed: true, time: 2),
                         ConsentStore.Decision(account: "work", client: "ssh:build-box@\(keyB)", allowed: true, time: 3)]
        guard case .forwarded(let forwarded) = host.identity.kind else { return XCTFail("not a host") }
        XCTAssertEqual(AccessGate.previousHostKey(of: forwarded, account: "work", in: decisions), keyC)
        XCTAssertEqual(AccessGate.previousHostKey(of: forwarded, account: "work", in: decisions.prefix(1)), keyA)
        XCTAssertNil(AccessGate.previousHostKey(of: forwarded, account: "work", in: decisions.suffix(1)))
        XCTAssertNil(AccessGate.previousHostKey(of: forwarded, account: "other", in: decisions))
    }

    /// A remembered decision names a path as bytes: one for `café` precomposed neither grants nor is forgotten for
    /// the decomposed spelling (Swift's `String ==` and hashing call them equal).
    func testRememberedDecisionsMatchPathsAsBytes() throws {
        let precomposed = "/opt/caf\u{00E9}/tool"
        let decomposed = "/opt/cafe\u{0301}/tool"
        let store = ConsentStore(path: directory.appendingPathComponent("consent.json").path)
        XCTAssertNil(store.save([ConsentStore.Decision(account: "work", client: precomposed, allowed: true, time: 1)]))
        var (_, caller) = try spawnCaller()
        caller.identity = ClientIdentity(exe: decomposed)
        let judge = gate(AccessPolicy(confirm: .firstUse), store: store)
        XCTAssertEqual(judge.verdict(caller, account: "work"), .ask, "a decision for another path's bytes was applied")
        XCTAssertEqual(try judge.forget(account: nil, client: decomposed, by: try approver()), [])
        caller.identity = ClientIdentity(exe: precomposed)
        XCTAssertEqual(judge.verdict(caller, account: "work"), .grant(.approved))
    }
}

/// Counts how often a consent question's timer was stopped.
final class TimerBox: @unchecked Sendable {
    private let lock = NSLock()
    private var count = 0
    func stopped() { lock.withLock { count += 1 } }
    var stops: Int { lock.withLock { count } }
}

/// A monotonic clock the test moves.
final class ClockBox: @unchecked Sendable {
    private let lock = NSLock()
    private var instant = ContinuousClock.now
    var now: ContinuousClock.Instant { lock.withLock { instant } }
    func advance(_ by: Duration) { lock.withLock { instant += by } }
}

/// A ``ConsentPrompter`` that records what it was told.
final class PrompterBox: ConsentPrompter, @unchecked Sendable {
    private let lock = NSLock()
    private var asks: [Int] = []
    private var withdrawals: [Int] = []
    func ask(_ request: PendingConsent) { lock.withLock { asks.append(request.id) } }
    func withdraw(_ id: Int) { lock.withLock { withdrawals.append(id) } }
    var asked: [Int] { lock.withLock { asks } }
    var withdrawn: [Int] { lock.withLock { withdrawals } }
}

func XCTAssertThrowsAsync<T>(_ body: @autoclosure () async throws -> T, file: StaticString = #filePath, line: UInt = #line) async {
    do {
        _ = try await body()
        XCTFail("expected an error", file: file, line: line)
    } catch {}
}

actor EventBox {
    var all: [WireEvent] = []
    func add(_ event: WireEvent) { all.append(event) }
}
