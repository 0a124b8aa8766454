@testable import AgentAccess
import AgentIPC
import AuthCore
import XCTest

/// The walk from the agent's authctl to the program behind it, against in-memory process tables that can change
/// between two reads the way a real one does (a parent that exits and whose pid is taken, a child reparented).
/// The reads themselves (`/proc`) and the relay's file check run in `e2e/test_relay.py` with real git, msmtp and kubectl.
final class RelayChainTests: XCTestCase {
    final class Table: ProcessTable {
        var parents: [Int32: Int32] = [:]
        var identities: [Int32: ClientIdentity] = [:]
        /// Runs after each identity read: lets a test change the table in the middle of the walk.
        var afterIdentity: (Int32, Table) -> Void = { _, _ in }
        var reads: [Int32] = []

        func parent(of pid: Int32) -> Int32? { parents[pid] }

        func identity(of pid: Int32) -> ClientIdentity {
            reads.append(pid)
            defer { afterIdentity(pid, self) }
            return identities[pid] ?? ClientIdentity(exe: nil)
        }

        func process(_ pid: Int32, parent: Int32, _ exe: String, unit: String? = nil, deleted: Bool = false,
                     app: String? = nil) {
            parents[pid] = parent
            identities[pid] = ClientIdentity(app.map { .flatpak(.init(id: $0)) } ?? .desktop, exe: exe, exeDeleted: deleted, unit: unit)
        }
    }

    static let authctl = ClientIdentity(exe: "/usr/bin/authctl", unit: "mbsync.service")
    static let authctlPID: Int32 = 100

    func table(_ build: (Table) -> Void) -> Table {
        let table = Table()
        table.parents[Self.authctlPID] = 60
        build(table)
        return table
    }

    func behind(_ table: Table) -> ClientIdentity {
        RelayChain.behind(Self.authctlPID, relay: Self.authctl, in: table)
    }

    /// How people read `identity` (the one describer).
    func words(_ identity: ClientIdentity) -> String { Caller(pid: 1, uid: 0, via: "socket", identity: identity).described() }

    func testTheParentIsTheProgram() {
        let identity = behind(table { $0.process(60, parent: 1, "/usr/bin/kubectl", unit: "session-2.scope") })
        XCTAssertEqual(identity.exe, "/usr/bin/kubectl")
        XCTAssertEqual(identity.unit, "session-2.scope")
        XCTAssertEqual(identity.relay, ClientIdentity.Relay(exe: "/usr/bin/authctl", unit: "mbsync.service", shells: []))
        XCTAssertEqual(identity.consentKey, "/usr/bin/kubectl", "the user is asked about the program, not authctl")
        XCTAssertEqual(words(identity), "/usr/bin/kubectl via authctl unit:session-2.scope")
    }

    func testShellsAreWalkedThroughNearestToTheProgramFirst() {
        // git-remote-https runs `sh -c 'authctl git-credential ...'`, and that sh runs bash (a script helper).
        let identity = behind(table {
            $0.process(60, parent: 55, "/usr/bin/bash")
            $0.process(55, parent: 50, "/usr/bin/dash")
            $0.process(50, parent: 40, "/usr/lib/git-core/git-remote-https")
        })
        XCTAssertEqual(identity.exe, "/usr/lib/git-core/git-remote-https")
        XCTAssertEqual(identity.relay?.shells, ["/usr/bin/dash", "/usr/bin/bash"])
        XCTAssertEqual(identity.relay?.executables, ["/usr/bin/dash", "/usr/bin/bash", "/usr/bin/authctl"])
        XCTAssertEqual(words(identity), "/usr/lib/git-core/git-remote-https via dash via bash via authctl")
    }

    func testAtMostMaxShellsAreWalked() {
        func chain(shells: Int) -> Table {
            table { table in
                var pid: Int32 = 60
                for _ in 0..<shells {
                    table.process(pid, parent: pid - 1, "/usr/bin/dash")
                    pid -= 1
                }
                table.process(pid, parent: 1, "/usr/bin/msmtp")
            }
        }
        XCTAssertEqual(behind(chain(shells: RelayChain.maxShells)).exe, "/usr/bin/msmtp")
        let deep = behind(chain(shells: RelayChain.maxShells + 1))
        XCTAssertNil(deep.exe, "a deeper chain is not identified")
        XCTAssertNil(deep.consentKey)
        XCTAssertEqual(deep.relay?.exe, "/usr/bin/authctl")
        XCTAssertEqual(words(deep), "an unknown executable via authctl")
    }

    func testOnlyKnownShellsUnchangedAndOutsideASandboxAreWalkedThrough() {
        // zsh, python and env are programs: what they run, they ran.
        for program in ["/usr/bin/zsh", "/usr/bin/python3.11", "/usr/bin/env", "/home/u/bin/sh", "/tmp/dash"] {
            let identity = behind(table { $0.process(60, parent: 50, program); $0.process(50, parent: 1, "/usr/bin/msmtp") })
            XCTAssertEqual(identity.exe, program)
        }
        // A replaced shell may be anything now: it is the program, and unidentified.
        let replaced = behind(table {
            $0.process(60, parent: 50, "/usr/bin/bash", deleted: true)
            $0.process(50, parent: 1, "/usr/bin/msmtp")
        })
        XCTAssertEqual(replaced.exe, "/usr/bin/bash")
        XCTAssertTrue(replaced.exeDeleted)
        XCTAssertNil(replaced.consentKey)
        // A sandbox's /usr/bin/dash is the sandbox's own file.
        let sandboxed = behind(table {
            $0.process(60, parent: 50, "/usr/bin/dash", app: "org.example.App")
            $0.process(50, parent: 1, "/usr/bin/msmtp")
        })
        XCTAssertEqual(sandboxed.flatpakAppID, "org.example.App")
        XCTAssertEqual(sandboxed.relay?.shells, [])
    }

    func testAParentThatCannotBeReadIsUnknown() {
        XCTAssertNil(behind(table { $0.parents[Self.authctlPID] = nil }).exe, "authctl gone")
        XCTAssertNil(behind(table { $0.parents[Self.authctlPID] = 0 }).exe, "a parent outside the agent's pid namespace")
        XCTAssertNil(behind(table { $0.process(60, parent: 0, "/usr/bin/dash") }).exe, "a shell whose parent is not visible")
        // An unreadable executable (another user's program, a process exiting) is unknown too.
        let unreadable = behind(table { $0.parents[60] = 1 })
        XCTAssertNil(unreadable.exe)
        XCTAssertEqual(unreadable.relay?.exe, "/usr/bin/authctl")
    }

    func testAParentThatExitsWhileItIsReadIsNotTrusted() {
        // The real parent (a program of the user's own) exits right after its files were read: the kernel moves
        // authctl to the subreaper, and its pid is then taken by /usr/bin/msmtp.
        let table = table { $0.process(60, parent: 1, "/usr/bin/msmtp") }
        table.afterIdentity = { pid, table in
            guard pid == 60 else { return }
            table.parents[Self.authctlPID] = 1
        }
        XCTAssertNil(behind(table).exe, "authctl no longer names that parent: what was read is not vouched for")
    }

    func testAShellThatExitsWhileItsParentIsReadIsNotTrusted() {
        // The read order: authctl's parent (a shell), then the shell's parent. The shell exits after its parent was
        // read, its child authctl is reparented, and the shell's pid goes to another process with an allowed parent.
        let table = table {
            $0.process(60, parent: 50, "/usr/bin/dash")
            $0.process(50, parent: 1, "/usr/bin/msmtp")
        }
        table.afterIdentity = { pid, table in
            guard pid == 50 else { return }
            table.parents[Self.authctlPID] = 1
        }
        XCTAssertNil(behind(table).exe)
        // And the other way round: the program above the shell changes (the shell was reparented) after it was read.
        let other = self.table {
            $0.process(60, parent: 50, "/usr/bin/dash")
            $0.process(50, parent: 1, "/usr/bin/msmtp")
        }
        other.afterIdentity = { pid, table in
            guard pid == 50 else { return }
            table.parents[60] = 1
        }
        XCTAssertNil(behind(other).exe)
        XCTAssertEqual(other.reads, [60, 50])
    }

    func testTheRelayedIdentityUnderAPolicy() throws {
        let msmtp = behind(table {
            $0.process(60, parent: 50, "/usr/bin/dash")
            $0.process(50, parent: 1, "/usr/bin/msmtp", unit: "session-2.scope")
        })
        func policy(_ entries: String...) throws -> AccessPolicy {
            AccessPolicy(allowedClients: try entries.map { try ClientRule.parse($0).get() })
        }
        XCTAssertEqual(try policy("/usr/bin/msmtp").decide(msmtp, remembered: nil), .grant(.listed))
        XCTAssertEqual(try policy("/usr/bin/git").decide(msmtp, remembered: nil), .deny(.notListed))
        XCTAssertEqual(try policy("/usr/bin/dash").decide(msmtp, remembered: nil), .deny(.notListed),
                       "a shell in between is never the program")
        XCTAssertEqual(try policy("/usr/bin/authctl").decide(msmtp, remembered: nil), .grant(.listed),
                       "listing authctl itself serves whatever runs it")
        XCTAssertEqual(try policy("unit:mbsync.service").decide(msmtp, remembered: nil), .grant(.listed),
                       "a unit entry naming authctl's own unit matches it")
        XCTAssertEqual(try policy("unit:session-2.scope").decide(msmtp, remembered: nil), .grant(.listed))
        let unknown = behind(table { $0.parents[Self.authctlPID] = nil })
        XCTAssertEqual(try policy("/usr/bin/msmtp").decide(unknown, remembered: nil), .deny(.unidentified))
        XCTAssertEqual(try policy("/usr/bin/authctl").decide(unknown, remembered: nil), .grant(.listed))
        XCTAssertEqual(AccessPolicy(confirm: .firstUse).decide(unknown, remembered: true), .deny(.unidentified),
                       "nothing can be remembered for an unknown program")
        XCTAssertEqual(AccessPolicy(confirm: .firstUse).decide(msmtp, remembered: true), .grant(.approved))
    }

    func testTheWireCallerNamesTheChain() {
        let identity = behind(table {
            $0.process(60, parent: 50, "/usr/bin/dash")
            $0.process(50, parent: 1, "/usr/bin/msmtp")
        })
        let wire = WireCaller(pid: 100, via: "socket", identity: identity)
        XCTAssertEqual(wire.exe, "/usr/bin/msmtp")
        XCTAssertEqual(wire.relayedBy, ["/usr/bin/dash", "/usr/bin/authctl"])
        XCTAssertNil(WireCaller(pid: 100, via: "socket", identity: Self.authctl).relayedBy)
    }
}
