@testable import AuthCore
import AuthTestSupport
import Foundation
import XCTest

/// The sign-in lifecycle of one account (``SignInCoordinator``), step by step on the manual clock, with no broker and
/// no I/O: each step's action and the state it leaves. A flow is a plain string here.
final class SignInCoordinatorTests: XCTestCase {
    typealias Machine = SignInCoordinator<String>

    let clock = ManualClock()
    let a = UUID()
    let b = UUID()
    let c = UUID()

    enum Begun {
        case start(Machine.Pending)
        case join(Machine.Pending)
        case refuse(failures: Int, retryAfter: Duration)
    }

    /// `begin`, and on `.start` what the broker does: make a flow named after the step (counting the flows made) and
    /// hand it over with `started`.
    private func begin(_ machine: inout Machine, _ id: UUID, _ method: LoginMethod = .redirect,
                       made: inout [String]) -> Begun {
        switch machine.begin(now: clock.now()) {
        case .start:
            made.append("flow-\(made.count + 1)")
            return .start(machine.started(id: id, method: method, now: clock.now(), flow: made.last!))
        case .join(let pending): return .join(pending)
        case .refuse(let failures, let wait): return .refuse(failures: failures, retryAfter: wait)
        }
    }

    func testTheFirstCallerStartsAndLaterCallersJoinWhateverMethodTheyAsk() throws {
        var machine = Machine()
        var made: [String] = []
        guard case .idle = machine.state else { return XCTFail("a new account has no sign-in") }

        guard case .start(let started) = begin(&machine, a, .device, made: &made) else { return XCTFail("did not start") }
        XCTAssertEqual(started.id, a)
        XCTAssertEqual(started.flow, "flow-1")
        XCTAssertEqual(started.method, .device)
        XCTAssertEqual(started.startedAt, clock.now())
        XCTAssertEqual(started.waiters, 1, "the caller that starts is the first waiter")

        clock.advance(.seconds(3))
        guard case .join(let joined) = begin(&machine, b, .redirect, made: &made) else { return XCTFail("did not join") }
        XCTAssertEqual(joined.id, a, "the joiner gets the pending sign-in, not one with its own id")
        XCTAssertEqual(joined.method, .device, "a joiner gets the pending sign-in as it is")
        XCTAssertEqual(joined.waiters, 2)
        XCTAssertEqual(made, ["flow-1"], "joining starts nothing")
        XCTAssertEqual(machine.pending?.waiters, 2)
        XCTAssertTrue(machine.isPending)
    }

    func testBeginOnlyDecidesAndStartedLeavesAPendingSignInAsItIs() {
        var machine = Machine()
        guard case .start = machine.begin(now: clock.now()) else { return XCTFail("did not say start") }
        XCTAssertFalse(machine.isPending, "begin decided; the sign-in is pending only once its flow is handed over")
        _ = machine.started(id: a, method: .redirect, now: clock.now(), flow: "flow-1")
        let kept = machine.started(id: b, method: .device, now: clock.now(), flow: "stray")
        XCTAssertEqual(kept.id, a)
        XCTAssertEqual(kept.flow, "flow-1")
        XCTAssertEqual(machine.pending?.waiters, 1)
    }

    func testTheLastWaiterLeavingCancelsOnce() {
        var machine = Machine()
        var made: [String] = []
        _ = begin(&machine, a, made: &made)
        _ = begin(&machine, b, made: &made)

        guard case .none = machine.leave(id: b) else { return XCTFail("a leave with an id that is not pending acted") }
        guard case .none = machine.leave(id: a) else { return XCTFail("cancelled while a waiter remained") }
        XCTAssertEqual(machine.pending?.waiters, 1)
        guard case .cancel(let flow) = machine.leave(id: a) else { return XCTFail("the last waiter left: not cancelled") }
        XCTAssertEqual(flow, "flow-1")
        XCTAssertEqual(machine.pending?.cancelled, true)
        XCTAssertTrue(machine.isPending, "a cancelled sign-in stays pending until its flow has ended")
        guard case .none = machine.leave(id: a) else { return XCTFail("cancelled twice") }
        XCTAssertEqual(machine.pending?.waiters, 0, "the count never goes below zero")

        // A caller arriving before the flow noticed joins it (and gets its cancellation), as the broker always did.
        guard case .join(let joined) = begin(&machine, c, made: &made), joined.cancelled else {
            return XCTFail("a caller did not join the cancelled sign-in")
        }
        XCTAssertEqual(made.count, 1)

        guard case .announce = machine.end(id: a, result: .cancelled, now: clock.now()) else { return XCTFail("no announce") }
        guard case .ended(let ended) = machine.state else { return XCTFail("not ended") }
        XCTAssertEqual(ended.result, .cancelled)
        XCTAssertEqual(machine.failures, [], "a cancelled sign-in is no failure")
    }

    func testATicketFindsItsOwnSignInPendingOrEndedAndNoOther() {
        var machine = Machine()
        var made: [String] = []
        guard case .gone = machine.wait(for: a) else { return XCTFail("found a sign-in that never ran") }
        _ = begin(&machine, a, made: &made)
        guard case .wait("flow-1") = machine.wait(for: a) else { return XCTFail("the pending sign-in was not found") }
        guard case .gone = machine.wait(for: b) else { return XCTFail("a foreign ticket found the pending sign-in") }

        // The browser was fast: the sign-in ends before its caller comes for the result.
        guard case .announce = machine.end(id: a, result: .signedIn, now: clock.now()) else { return XCTFail("no announce") }
        XCTAssertFalse(machine.isPending)
        guard case .collect("flow-1") = machine.wait(for: a) else { return XCTFail("the ended sign-in's result is lost") }

        // A new sign-in starts; a caller still holding the old ticket gets the old result.
        guard case .start = begin(&machine, b, made: &made) else { return XCTFail("no new sign-in after the end") }
        guard case .collect("flow-1") = machine.wait(for: a) else { return XCTFail("the previous sign-in's result is lost") }
        guard case .wait("flow-2") = machine.wait(for: b) else { return XCTFail("the new sign-in was not found") }
        guard case .announce = machine.end(id: b, result: .failed(.accessDenied), now: clock.now()) else {
            return XCTFail("no announce")
        }
        guard case .gone = machine.wait(for: a) else { return XCTFail("only the last ended sign-in is kept") }
        guard case .collect("flow-2") = machine.wait(for: b) else { return XCTFail("the last ended sign-in is lost") }
    }

    func testTheEndOfASignInThatIsNotPendingChangesNothingButStillCounts() {
        var machine = Machine()
        var made: [String] = []
        _ = begin(&machine, a, made: &made)
        guard case .none = machine.end(id: b, result: .failed(.loginTimeout), now: clock.now()) else {
            return XCTFail("announced the end of a sign-in that is not pending")
        }
        XCTAssertEqual(machine.pending?.id, a)
        XCTAssertEqual(machine.failures, [clock.now()])
    }

    func testRepeatedFailuresAtTheServerAreRateLimitedAndASuccessClearsThem() {
        var machine = Machine()
        var made: [String] = []
        for id in [a, b, c] {
            guard case .start = begin(&machine, id, made: &made) else { return XCTFail("refused too early") }
            _ = machine.end(id: id, result: .failed(.accessDenied), now: clock.now())
            clock.advance(.seconds(5))
        }
        XCTAssertEqual(machine.failures.count, 3)
        let ended = machine.state
        guard case .refuse(let failures, let wait) = begin(&machine, UUID(), made: &made) else {
            return XCTFail("a fourth sign-in right after three failures was not limited")
        }
        XCTAssertEqual(failures, 3)
        XCTAssertEqual(wait, .seconds(55), "60 s after the last failure, which was 5 s ago")
        XCTAssertEqual(made.count, 3, "a refused sign-in makes no flow")
        guard case .ended(let still) = machine.state, case .ended(let before) = ended, still.id == before.id else {
            return XCTFail("a refusal changed the state")
        }

        clock.advance(.seconds(54))
        guard case .refuse(_, let rest) = begin(&machine, UUID(), made: &made) else { return XCTFail("refused too briefly") }
        XCTAssertEqual(rest, .seconds(1))
        clock.advance(.seconds(1))
        let d = UUID()
        guard case .start = begin(&machine, d, made: &made) else { return XCTFail("still refused after the pause") }
        _ = machine.end(id: d, result: .signedIn, now: clock.now())
        XCTAssertEqual(machine.failures, [], "a success clears the record")
    }

    func testOnlyFailuresAtTheServerCountAndTheRecordIsBounded() {
        var machine = Machine(limit: LoginRateLimit(freeFailures: 100))
        var made: [String] = []
        for code in [AuthError.Code.loginCancelled, .keyringLocked, .loginRateLimited, .serverUnreachable] {
            let id = UUID()
            _ = begin(&machine, id, made: &made)
            _ = machine.end(id: id, result: Machine.Result(code), now: clock.now())
        }
        XCTAssertEqual(machine.failures, [], "cancellation and local trouble are not failures of the sign-in")
        XCTAssertEqual(Machine.Result(.loginCancelled), .cancelled)
        XCTAssertEqual(Machine.Result(.accessDenied), .failed(.accessDenied))

        for _ in 0..<20 {
            let id = UUID()
            _ = begin(&machine, id, made: &made)
            _ = machine.end(id: id, result: .failed(.loginTimeout), now: clock.now())
            clock.advance(.seconds(1))
        }
        XCTAssertEqual(machine.failures.count, Machine.failureMemory, "only the most recent failures are kept")
        XCTAssertEqual(machine.failures.last, clock.now() - .seconds(1))
    }

    func testTheRouteFollowsTheMethodAndWhatTheServerOffers() {
        for browser in [true, false] {
            XCTAssertEqual(SignInRoute.choose(.device, offersDevice: true, openBrowser: browser), .device)
            XCTAssertEqual(SignInRoute.choose(.device, offersDevice: false, openBrowser: browser), .deviceUnsupported)
            XCTAssertEqual(SignInRoute.choose(.preferDevice, offersDevice: true, openBrowser: browser), .device)
            XCTAssertEqual(SignInRoute.choose(.preferDevice, offersDevice: false, openBrowser: browser),
                           .redirect(deviceFallback: false), "no device grant: the redirect, without a fallback")
            XCTAssertEqual(SignInRoute.choose(.redirect, offersDevice: false, openBrowser: browser),
                           .redirect(deviceFallback: false))
        }
        XCTAssertEqual(SignInRoute.choose(.redirect, offersDevice: true, openBrowser: true), .redirect(deviceFallback: true),
                       "a browser that cannot start gives way to a device code")
        XCTAssertEqual(SignInRoute.choose(.redirect, offersDevice: true, openBrowser: false), .redirect(deviceFallback: false),
                       "a paste sign-in never turns into a device sign-in")
    }
}
