@testable import AgentServer
@testable import AgentAccess
import XCTest

/// A connection's lifecycle, step by step, without a socket: lines, the line cap, the in-flight cap, back-pressure
/// from unread replies, half-close, draining and hang-up (``ConnectionStateMachine``).
final class ConnectionStateMachineTests: XCTestCase {
    func machine(maxLine: Int = 64, maxInFlight: Int = 2, outputLimit: Int = 100) -> ConnectionStateMachine {
        ConnectionStateMachine(maxLine: maxLine, maxInFlight: maxInFlight, outputLimit: outputLimit)
    }

    func receive(_ text: String, into machine: inout ConnectionStateMachine) {
        Array(text.utf8).withUnsafeBytes { machine.received($0) }
    }

    func queue(_ count: Int, into machine: inout ConnectionStateMachine) {
        [UInt8](repeating: 0x41, count: count).withUnsafeBytes { machine.queue($0) }
    }

    func line(_ text: String) -> ConnectionStateMachine.Next { .line(ArraySlice(text.utf8)) }

    func testLinesAreServedAsTheyCompleteAcrossReads() {
        var m = machine()
        XCTAssertTrue(m.wantsRead)
        receive("{\"a\"", into: &m)
        XCTAssertEqual(m.nextLine(), .none, "no newline yet")
        XCTAssertTrue(m.wantsRead)
        receive(":1}\r\n{\"b\":2}\n{\"c\"", into: &m)
        XCTAssertFalse(m.wantsRead, "complete lines wait to be served before more is read")
        XCTAssertEqual(m.nextLine(), line("{\"a\":1}"), "a CR before the newline is dropped")
        XCTAssertEqual(m.nextLine(), line("{\"b\":2}"))
        XCTAssertEqual(m.nextLine(), .none)
        XCTAssertTrue(m.wantsRead)
        receive(":3}\n", into: &m)
        XCTAssertEqual(m.nextLine(), line("{\"c\":3}"))
        XCTAssertEqual(m.nextLine(), .none)
        XCTAssertEqual(m.state, .open)
        XCTAssertFalse(m.isFinished)
    }

    func testAnEmptyLineIsStillALine() {
        var m = machine()
        receive("\n", into: &m)
        XCTAssertEqual(m.nextLine(), .line([]), "answered as a bad request by the owner, not skipped")
    }

    func testALastLineWithoutANewlineIsServedAfterTheInputEnds() {
        var m = machine()
        receive("{\"v\":1}", into: &m)
        XCTAssertEqual(m.nextLine(), .none)
        m.inputEnded()
        XCTAssertEqual(m.state, .draining)
        XCTAssertFalse(m.wantsRead, "nothing is read after the end of input")
        XCTAssertFalse(m.isFinished, "a line is still to be served")
        XCTAssertEqual(m.nextLine(), line("{\"v\":1}"))
        XCTAssertTrue(m.isFinished)
        receive("late\n", into: &m)
        XCTAssertEqual(m.nextLine(), .none, "bytes after the end of input are ignored")
    }

    func testALineOverTheCapIsReportedOnceAndNothingMoreIsRead() {
        var m = machine(maxLine: 8)
        receive("12345678\n", into: &m)
        XCTAssertEqual(m.nextLine(), line("12345678"), "exactly the cap is allowed")
        receive("123456789", into: &m)
        XCTAssertEqual(m.nextLine(), .tooLong, "a partial line over the cap is refused without waiting for its end")
        XCTAssertEqual(m.state, .draining)
        XCTAssertEqual(m.nextLine(), .none)
        XCTAssertFalse(m.wantsRead)
        XCTAssertTrue(m.isFinished)
    }

    func testACompleteLineOverTheCapIsRefusedAndTheLinesBeforeItServed() {
        var m = machine(maxLine: 8)
        receive("ok\n0123456789\nnever\n", into: &m)
        XCTAssertEqual(m.nextLine(), line("ok"))
        XCTAssertEqual(m.nextLine(), .tooLong)
        XCTAssertEqual(m.nextLine(), .none, "nothing after an over-long line is served")
    }

    func testAtTheInFlightCapNoLineIsServedAndNothingIsRead() {
        var m = machine(maxInFlight: 2)
        receive("a\nb\nc\n", into: &m)
        XCTAssertEqual(m.nextLine(), line("a"))
        m.started()
        XCTAssertEqual(m.nextLine(), line("b"))
        m.started()
        XCTAssertEqual(m.nextLine(), .none, "two in flight: the third waits")
        XCTAssertFalse(m.wantsRead)
        m.finished()
        XCTAssertEqual(m.nextLine(), line("c"))
        m.started()
        XCTAssertFalse(m.wantsRead)
        m.finished()
        XCTAssertTrue(m.wantsRead)
    }

    func testUnreadRepliesOverTheLimitStopReadingUntilWritten() {
        var m = machine(outputLimit: 100)
        receive("a\nb\n", into: &m)
        XCTAssertEqual(m.nextLine(), line("a"))
        queue(150, into: &m)
        XCTAssertTrue(m.wantsWrite)
        XCTAssertEqual(m.nextLine(), .none, "over the limit: the next line waits")
        XCTAssertFalse(m.canServe)
        XCTAssertFalse(m.wantsRead)
        XCTAssertEqual(m.withPendingOutput { $0.count }, 150)
        m.wrote(60)
        XCTAssertEqual(m.pendingOutputCount, 90)
        XCTAssertTrue(m.canServe, "writing made room: the held line can be served")
        XCTAssertEqual(m.nextLine(), line("b"))
        XCTAssertTrue(m.wantsRead)
        m.wrote(90)
        XCTAssertFalse(m.wantsWrite)
    }

    func testDrainingWaitsForEveryRequestAndEveryReplyThenFinishes() {
        var m = machine()
        receive("a\nb\n", into: &m)
        XCTAssertEqual(m.nextLine(), line("a"))
        m.started()
        m.inputEnded()
        XCTAssertEqual(m.nextLine(), line("b"), "lines received before the end are still served")
        XCTAssertEqual(m.nextLine(), .none, "no extra empty line after a complete last line")
        m.started()
        XCTAssertFalse(m.isFinished)
        m.finished()
        queue(10, into: &m)
        m.finished()
        XCTAssertFalse(m.isFinished, "a reply is still to be written")
        m.wrote(10)
        XCTAssertTrue(m.isFinished)
    }

    func testAHangUpClosesAtOnceAndDropsWhatWasPending() {
        var m = machine()
        receive("a\nb\n", into: &m)
        XCTAssertEqual(m.nextLine(), line("a"))
        m.started()
        queue(10, into: &m)
        m.hungUp()
        XCTAssertEqual(m.state, .closed)
        XCTAssertTrue(m.isFinished)
        XCTAssertEqual(m.nextLine(), .none)
        XCTAssertFalse(m.wantsRead)
        XCTAssertFalse(m.wantsWrite)
        queue(10, into: &m)
        XCTAssertEqual(m.pendingOutputCount, 0, "replies arriving after the hang-up are dropped")
    }

    /// Another process wrote to the connection while the socket had taken only part of a reply: the refusal goes
    /// out after the rest of that reply (and the replies queued behind it), never inside it; nothing more is read,
    /// served or answered, and the connection is finished once the refusal is written, whatever is still in flight.
    func testARefusalIsWrittenAfterTheHalfWrittenReplyThenTheConnectionCloses() {
        var m = machine(outputLimit: 100)
        receive("a\nb\n", into: &m)
        XCTAssertEqual(m.nextLine(), line("a"))
        m.started()
        XCTAssertEqual(m.nextLine(), line("b"))
        m.started()
        m.finished()
        Array("{\"id\":\"b\",\"result\":{}}\n".utf8).withUnsafeBytes { m.queue($0) }
        m.wrote(9)
        receive("{\"id\":\"c\"", into: &m)
        Array("REFUSED\n".utf8).withUnsafeBytes { m.refuse($0) }
        XCTAssertEqual(m.state, .refusing)
        XCTAssertEqual(m.withPendingOutput { Array($0) }, Array(",\"result\":{}}\nREFUSED\n".utf8),
                       "the rest of the reply, then the refusal")
        XCTAssertFalse(m.wantsRead, "nothing more is read")
        XCTAssertTrue(m.wantsWrite)
        receive("}\n", into: &m)
        XCTAssertEqual(m.nextLine(), .none, "what was received before or after the refusal is not served")
        XCTAssertFalse(m.canServe)
        m.inputEnded()
        XCTAssertEqual(m.state, .refusing, "a half-close does not undo the refusal")
        Array("OTHER\n".utf8).withUnsafeBytes { m.refuse($0) }
        m.finished()
        queue(10, into: &m)
        XCTAssertEqual(m.pendingOutputCount, 22, "a later reply (or a second refusal) never follows the refusal")
        m.wrote(17)
        XCTAssertFalse(m.isFinished, "the refusal is not written yet")
        XCTAssertEqual(m.withPendingOutput { Array($0) }, Array("USED\n".utf8))
        m.started()
        m.wrote(5)
        XCTAssertFalse(m.wantsWrite)
        XCTAssertTrue(m.isFinished, "written: finished, though a request is still in flight (its reply is dropped)")
        m.hungUp()
        XCTAssertEqual(m.state, .closed)
    }

    /// A client sending a long line a byte at a time is scanned once, not once per byte (quadratic work).
    func testALongLineArrivingByteByByteIsServedWhole() {
        var m = machine(maxLine: 4096)
        for _ in 0..<4000 {
            receive("x", into: &m)
            XCTAssertEqual(m.nextLine(), .none)
        }
        receive("\n", into: &m)
        XCTAssertEqual(m.nextLine(), .line(ArraySlice(repeating: 0x78, count: 4000)))
    }

    /// A client that reads its replies but always leaves some unread: the written part of the buffer is dropped as
    /// it goes, so the buffer stays near what is pending instead of growing with everything ever written.
    func testWrittenOutputIsDroppedWhileSomeIsStillPending() {
        var m = machine(outputLimit: 64 * 1024)
        for _ in 0..<1000 {
            queue(1000, into: &m)
            m.wrote(m.pendingOutputCount - 10)
        }
        XCTAssertEqual(m.pendingOutputCount, 10)
        XCTAssertLessThan(m.outputBufferCount, 16 * 1024, "1 MB written, 10 bytes pending")
    }
}
