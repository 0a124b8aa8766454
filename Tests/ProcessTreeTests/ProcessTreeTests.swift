import Glibc
import ProcessTree
import XCTest

/// The /proc reading and the walk up through shells that the agent (RelayChainTests: the program behind its authctl)
/// and authctl on a host (the program that asked through a forward) share.
final class ProcStatTests: XCTestCase {
    func testFieldsAfterAnAwkwardCommandName() throws {
        // Recorded from a process whose comm is "a) b (c" (comm may hold spaces and parentheses).
        let stat = try XCTUnwrap(ProcStat(text: "4242 (a) b (c) S 4100 4242 4242 34817 4242 4194304 123 0 0 0 0 0 0 0 20 0 1 0 630103 3133440 359 18446744073709551615 0 0"))
        XCTAssertEqual(stat, ProcStat(text: "4242 (x) S 4100 1 1 34817 1 1 1 1 1 1 1 1 1 1 1 1 1 1 630103"))
        XCTAssertEqual(stat.parent, 4100)
        XCTAssertEqual(stat.controllingTerminal, 34817)
        XCTAssertEqual(stat.startTime, 630103)
        let daemon = try XCTUnwrap(ProcStat(text: "77 (mbsync) S 1 77 77 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 99 0 0"))
        XCTAssertEqual(daemon.controllingTerminal, 0)
        XCTAssertEqual(daemon.startTime, 99)
        XCTAssertEqual(ProcStat(text: "1 (systemd) S 0 1 1 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 5")?.parent, 0, "init's parent is 0")
    }

    func testTextWithoutTheFieldsIsNothing() {
        XCTAssertNil(ProcStat(text: "garbage"))
        XCTAssertNil(ProcStat(text: "1 (x) S 1"))
        XCTAssertNil(ProcStat(text: "1 (systemd)"))
        XCTAssertNil(ProcStat(text: "4242 (x) S parent 1 1 0 1 1 1 1 1 1 1 1 1 1 1 1 1 1 630103"), "a field that is not a number")
    }

    func testThisProcessReadsAsItself() throws {
        let me = try XCTUnwrap(ProcStat.read(pid: getpid()))
        XCTAssertEqual(me.parent, getppid())
        XCTAssertNil(ProcStat.read(pid: 0))
        XCTAssertNotNil(ProcFile.executable(of: getpid()))
        XCTAssertNil(ProcFile.text("/proc/\(getpid())/stat", limit: 10), "longer than the limit: nil, not cut short")
    }

    func testDeletedExecutable() {
        XCTAssertEqual(ProcFile.executable(link: "/usr/bin/git").path, "/usr/bin/git")
        XCTAssertFalse(ProcFile.executable(link: "/usr/bin/git").deleted)
        XCTAssertEqual(ProcFile.executable(link: "/home/u/bin/tool (deleted)").path, "/home/u/bin/tool")
        XCTAssertTrue(ProcFile.executable(link: "/home/u/bin/tool (deleted)").deleted)
    }
}

final class AncestryTests: XCTestCase {
    /// A process table: pid -> (parent, executable); `changes` runs after each read of a parent (a table that moves
    /// while it is walked).
    final class Table {
        var processes: [Int32: (parent: Int32, exe: String)]
        var reads = 0
        var changes: (Table) -> Void = { _ in }
        init(_ processes: [Int32: (parent: Int32, exe: String)]) { self.processes = processes }
        func parent(_ pid: Int32) -> Int32? {
            defer { reads += 1; changes(self) }
            return processes[pid]?.parent
        }
        func walk(maxShells: Int = 4) -> Ancestry.Found<String?>? {
            Ancestry.firstNotShell(above: 100, parent: parent, read: { self.processes[$0]?.exe },
                                   shell: { $0.flatMap { $0.hasSuffix("sh") ? $0 : nil } }, maxShells: maxShells)
        }
    }

    func testThroughShellsToTheProgramNearestFirst() throws {
        let table = Table([100: (60, "/usr/bin/authctl"), 60: (50, "/usr/bin/dash"), 50: (40, "/usr/bin/bash"),
                           40: (1, "/usr/bin/msmtp")])
        let found = try XCTUnwrap(table.walk())
        XCTAssertEqual(found.program, "/usr/bin/msmtp")
        XCTAssertEqual(found.pid, 40)
        XCTAssertEqual(found.shells, ["/usr/bin/dash", "/usr/bin/bash"])
        XCTAssertEqual(try XCTUnwrap(Table([100: (40, "a"), 40: (1, "/usr/bin/git")]).walk()).shells, [], "no shell between")
    }

    func testTooManyShellsAGoneProcessOrAParentOutsideTheNamespaceIsNothing() throws {
        let deep = Table([100: (60, "a"), 60: (50, "/bin/sh"), 50: (40, "/bin/sh"), 40: (1, "/usr/bin/msmtp")])
        XCTAssertNil(deep.walk(maxShells: 1))
        XCTAssertNotNil(deep.walk(maxShells: 2))
        XCTAssertNil(Table([100: (60, "a"), 60: (0, "/bin/sh")]).walk(), "the parent is outside the pid namespace")
        XCTAssertNil(Table([:]).walk(), "the process itself is gone")
        // A parent gone after its child named it reads as nothing: the reader says what that is (unknown).
        XCTAssertEqual(try XCTUnwrap(Table([100: (60, "a"), 60: (50, "/bin/sh")]).walk()).program, nil)
    }

    func testAParentThatChangedWhileItWasReadIsNothing() {
        // The shell exits after it was read and its child is moved to init: what was read may be a later owner's pid.
        let table = Table([100: (60, "a"), 60: (50, "/bin/sh"), 50: (1, "/usr/bin/msmtp")])
        table.changes = { table in if table.reads == 2 { table.processes[100] = (1, "a") } }
        XCTAssertNil(table.walk())
    }
}
