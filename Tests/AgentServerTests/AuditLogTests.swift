import AgentIPC
@testable import AgentServer
@testable import AgentAccess
import Foundation
import Logging
import XCTest

/// The audit ring's `audit` replies: a full ring of long records must reach authctl in reply lines its reader takes
/// (``WireProtocol/maxMessageBytes``), newest first, and put together give every record once.
final class AuditLogTests: XCTestCase {
    static let longExe = "/home/user/" + String(repeating: "a-rather-long-directory-name/", count: 60) + "client"
    static let relays = ["/usr/bin/dash", "/usr/bin/bash", "/usr/bin/dash", "/usr/bin/bash",
                         "/usr/lib/auth-agent/" + String(repeating: "x", count: 200) + "/authctl"]

    func filledLog(_ count: Int, capacity: Int = 1000) -> AuditLog {
        let log = AuditLog(capacity: capacity, logger: Logger(label: "test"))
        for n in 0..<count {
            log.append(AuditEntry(time: 1_700_000_000 + n, account: n % 2 == 0 ? "work" : "home", outcome: AuditEntry.granted,
                                  reason: "listed", scopes: ["read", "write:\(n)"], resource: "https://api.example/\(n)",
                                  caller: WireCaller(pid: Int32(n + 2), via: "socket", exe: AuditLogTests.longExe,
                                                     relayedBy: AuditLogTests.relays)))
        }
        return log
    }

    /// The reply lines authctl would read, page by page, as the dispatcher encodes them.
    func pages(of log: AuditLog, account: String? = nil, since: Int? = nil) throws -> [AuditResult] {
        var pages: [AuditResult] = []
        var cursor: Int?
        repeat {
            let page = log.page(account: account, since: since, before: cursor)
            let line = RequestDispatcher.encodeLine(WireResponse(id: 1, result: page))
            XCTAssertLessThanOrEqual(line.count, WireProtocol.maxMessageBytes, "page \(pages.count)")
            XCTAssertFalse(page.entries.isEmpty)
            pages.append(try JSONDecoder().decode(WireResponse<AuditResult>.self, from: Data(line)).result!)
            if let next = page.next, let cursor { XCTAssertLessThan(next, cursor) }
            cursor = page.next
        } while cursor != nil && pages.count <= 1000
        return pages
    }

    func testAFullRingOfLongRecordsComesInPagesThatFitAReplyLine() throws {
        let log = filledLog(1300)
        let whole = RequestDispatcher.encodeLine(WireResponse(id: 1, result: AuditResult(entries: log.entries(), capacity: 1000)))
        XCTAssertGreaterThan(whole.count, 10 * WireProtocol.maxMessageBytes, "the ring as one line would not be read")
        let pages = try pages(of: log)
        XCTAssertGreaterThan(pages.count, 10)
        let joined = AuditResult.joined(pages)
        XCTAssertEqual(joined.entries, log.entries(), "every record once, oldest first")
        XCTAssertEqual(joined.entries.count, 1000)
        XCTAssertEqual(pages[0].entries.last?.time, 1_700_000_000 + 1299, "the first page has the newest record")
        XCTAssertNil(joined.next)
    }

    func testPagesKeepTheAccountAndSinceFilters() throws {
        let log = filledLog(1000)
        let joined = AuditResult.joined(try pages(of: log, account: "work", since: 1_700_000_100))
        XCTAssertEqual(joined.entries, log.entries(account: "work", since: 1_700_000_100))
        XCTAssertEqual(joined.entries.count, 450)
    }

    func testRecordsAppendedBetweenPagesDoNotShiftTheOlderPages() throws {
        let log = filledLog(1000)
        let first = log.page()
        let before = log.entries()
        log.append(log.entries().last!)  // evicts the oldest
        let second = log.page(before: first.next)
        XCTAssertEqual(second.entries.last, before[before.count - first.entries.count - 1])
    }

    func testARecordTooLongForAPageIsSentClipped() throws {
        let log = AuditLog(capacity: 10, logger: Logger(label: "test"))
        let scopes = (0..<64).map { "\u{1}" + String(repeating: "/", count: 1000) + "\($0)" }
        let huge = AuditEntry(time: 1, account: "work", outcome: AuditEntry.denied, reason: "not_listed", scopes: scopes,
                              resource: String(repeating: "\u{1f}", count: 60_000),
                              caller: WireCaller(pid: 2, via: "socket", exe: "/" + String(repeating: "é\n", count: 2000),
                                                 unit: String(repeating: "u", count: 300), relayedBy: [String](repeating: AuditLogTests.longExe, count: 20)))
        log.append(huge)
        log.append(AuditEntry(time: 2, account: "work", outcome: AuditEntry.granted, reason: "open", caller: WireCaller(pid: 3, via: "socket", exe: "/usr/bin/git")))
        let pages = try pages(of: log)
        let entries = AuditResult.joined(pages).entries
        XCTAssertEqual(entries.count, 2)
        XCTAssertEqual(entries[1].caller.exe, "/usr/bin/git")
        XCTAssertNil(entries[1].clipped)
        XCTAssertEqual(entries[0].clipped, true)
        XCTAssertEqual(entries[0].scopes?.count, AuditResult.clippedListCount)
        XCTAssertTrue(entries[0].caller.exe!.hasPrefix("/é\né\n"))
        XCTAssertLessThanOrEqual(entries[0].caller.exe!.utf8.count, AuditResult.clippedStringBytes)
        XCTAssertEqual(log.entries().first, huge, "the ring keeps the record whole")
    }
}
