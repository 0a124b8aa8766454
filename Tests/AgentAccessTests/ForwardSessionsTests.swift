@testable import AgentService
import AgentIPC
@testable import AgentAccess
import AuthCore
import Foundation
import ProcessTree
import Synchronization
import XCTest

/// Issue 45: a forward session's steps, each checked against the process tree (real child processes).
final class ForwardSessionsTests: ChildProcessTestCase {
    /// This test process, as the agent identifies a caller: pinned by its start time.
    func me() throws -> Caller {
        let start = try XCTUnwrap(ProcStat.read(pid: getpid())?.startTime)
        return Caller(pid: getpid(), uid: getuid(), via: "socket", exe: "/usr/bin/authctl",
                      process: ProcessPin(pid: getpid(), startTime: start))
    }

    func pinned(_ pid: Int32) throws -> Caller {
        let stat = try XCTUnwrap(ProcFile.text("/proc/\(pid)/stat"))
        return Caller(pid: pid, uid: getuid(), via: "socket", exe: "/usr/bin/ssh",
                      process: ProcessPin(pid: pid, startTime: try XCTUnwrap(ProcStat(text: stat)?.startTime)))
    }

    func testASessionServesTheSSHItsAuthctlStartedOnceTheHostKeyIsKnownAndEndsWithItsSocket() async throws {
        let sessions = ForwardSessions()
        let owner = try me()
        XCTAssertThrowsError(try sessions.open(host: "build-box", owner: owner, directory: "/run/x"),
                             "no socket front end to serve it")
        let listeners = RecordingDoors()
        sessions.attach(listeners)
        var confined = owner
        confined.identity.kind = .unknownForward
        XCTAssertThrowsError(try sessions.open(host: "build-box", owner: confined, directory: "/run/x"))
        // Issue 53: only a program of the desktop opens forwards, not even a container that made its own root.
        for kind: ClientIdentity.Kind in [.hostContainer, .container, .unidentified(why: "test"), .flatpak(.init(id: "org.example.App"))] {
            var other = owner
            other.identity.kind = kind
            XCTAssertThrowsError(try sessions.open(host: "build-box", owner: other, directory: "/run/x"), "\(kind)")
        }
        XCTAssertThrowsError(try sessions.open(host: "-oProxyCommand=x", owner: owner, directory: "/run/x"))

        let (session, stopped) = try sessions.open(host: "build-box", owner: owner, directory: "/run/x")
        XCTAssertTrue(session.socketPath.hasPrefix("/run/x/forward-"))
        XCTAssertEqual(listeners.events.withLock { $0 }, ["listen \(session.id) \(session.socketPath)"])

        let ssh = try spawn("/bin/sleep", ["30"]).processIdentifier
        let sshCaller = try pinned(ssh)
        guard case .failure(let unnamed) = sessions.admit(sshCaller, session: session.id) else {
            return XCTFail("served before authctl named its ssh")
        }
        XCTAssertTrue(unnamed.message.contains("not named yet"), unnamed.message)

        // Only the authctl that opened it names its ssh, which must be its child, once.
        let stranger = try pinned(ssh)
        XCTAssertThrowsError(try sessions.bindSSH(session.id, pid: Int(ssh), by: stranger))
        XCTAssertThrowsError(try sessions.bindSSH(session.id, pid: Int(getppid()), by: owner), "not a child of authctl")
        try sessions.bindSSH(session.id, pid: Int(ssh), by: owner)
        XCTAssertThrowsError(try sessions.bindSSH(session.id, pid: Int(ssh), by: owner), "named once")

        guard case .failure(let keyless) = sessions.admit(sshCaller, session: session.id) else {
            return XCTFail("served before ssh reported the host key")
        }
        XCTAssertTrue(keyless.message.contains("KnownHostsCommand"), keyless.message)
        // The host key comes from a child of that ssh only: this process is its parent, not its child.
        XCTAssertThrowsError(try sessions.recordHostKey(session.id, fingerprint: "SHA256:" + String(repeating: "A", count: 43),
                                                        by: owner))
        XCTAssertThrowsError(try sessions.recordHostKey(session.id, fingerprint: "NONE", by: owner))
        guard case .failure = sessions.admit(try me(), session: session.id) else {
            return XCTFail("another process was served on the session's socket")
        }

        XCTAssertEqual(sessions.list().map(\.host), ["build-box"])
        XCTAssertEqual(sessions.stop(host: "other").count, 0)
        XCTAssertEqual(sessions.stop(host: "build-box").map(\.id), [session.id])
        for await _ in stopped {}
        XCTAssertEqual(listeners.events.withLock { $0 }, ["listen \(session.id) \(session.socketPath)", "close \(session.id)"])
        XCTAssertTrue(sessions.list().isEmpty)
        guard case .failure(let ended) = sessions.admit(sshCaller, session: session.id) else {
            return XCTFail("served after the session ended")
        }
        XCTAssertTrue(ended.message.contains("ended"), ended.message)
    }

    /// Issue 54, item 2: a session opened for `127.0.0.1:22022` typed as `build-box` is listed with that alias and
    /// stopped by it (or by ssh's name). Before: `--stop build-box` found no forward while `--list` showed it.
    func testASessionIsListedAndStoppedByTheNameThePersonTyped() throws {
        let sessions = ForwardSessions()
        sessions.attach(RecordingDoors())
        let owner = try me()
        XCTAssertThrowsError(try sessions.open(host: "127.0.0.1:22022", alias: "-oProxyCommand=x", owner: owner, directory: "/run/x"))
        let (same, _) = try sessions.open(host: "build-box", alias: "build-box", owner: owner, directory: "/run/x")
        XCTAssertNil(same.alias, "an alias equal to ssh's name is no alias")
        let (typed, _) = try sessions.open(host: "127.0.0.1:22022", alias: "build-box", owner: owner, directory: "/run/x")
        XCTAssertEqual(typed.alias, "build-box")
        XCTAssertEqual(typed.shownName, "build-box")
        XCTAssertEqual(sessions.list().map(\.shownName).sorted(), ["build-box", "build-box"])
        XCTAssertEqual(Set(sessions.stop(host: "build-box").map(\.id)), [same.id, typed.id])
        let (again, _) = try sessions.open(host: "127.0.0.1:22022", alias: "build-box", owner: owner, directory: "/run/x")
        XCTAssertEqual(sessions.stop(host: "127.0.0.1:22022").map(\.id), [again.id], "ssh's name stops it too")
        XCTAssertTrue(sessions.list().isEmpty)
    }

    func testTheProgramAHostSaysIsKeptForItAloneShortAndPrintable() throws {
        let local = Caller(pid: 1, uid: 1, via: "socket", exe: "/usr/bin/git")
        XCTAssertEqual(AgentOperations.withSaidProgram("/usr/bin/evil", local).identity, local.identity, "a local caller says nothing")
        var host = local
        let key = "SHA256:" + String(repeating: "A", count: 43)
        host.identity.kind = .forwarded(.init(name: "build-box", fingerprint: key, session: "s1"))
        let said = AgentOperations.withSaidProgram("/usr/bin/git\u{1B}[2J\u{202E}<b>" + String(repeating: "x", count: 300), host)
        guard case .forwarded(let forwarded) = said.identity.kind, let program = forwarded.program else { return XCTFail("no program") }
        XCTAssertEqual([forwarded.name, forwarded.fingerprint], ["build-box", key])
        XCTAssertTrue(program.hasPrefix("/usr/bin/git\u{1B}[2J") && program.unicodeScalars.count <= 256, program)
        // Kept as said; shown to people with no control, format or bidi character (issue 53, hole 6).
        let words = said.described()
        XCTAssertTrue(words.contains("running /usr/bin/git\u{FFFD}[2J\u{FFFD}<b>"), words)
        XCTAssertFalse(words.unicodeScalars.contains { $0.value == 0x1B || $0.value == 0x202E }, words)
        XCTAssertEqual(said.identity.consentKey, host.identity.consentKey, "what the host says never names it")
        XCTAssertEqual(said.audited.value.remoteProgram, program)
    }

    /// ssh shows one host key per connection: a second, different report makes the session serve nothing. The
    /// reports come from a child of the session's ssh (here a shell standing for ssh, and its child for the
    /// KnownHostsCommand).
    func testTwoDifferentHostKeysMakeTheSessionServeNothing() async throws {
        let sessions = ForwardSessions()
        sessions.attach(RecordingDoors())
        let (session, _) = try sessions.open(host: "build-box", owner: try me(), directory: "/run/x")
        defer { sessions.close(session.id) }
        let ssh = try spawn("/bin/sh", ["-c", "sleep 30 & wait"]).processIdentifier
        try sessions.bindSSH(session.id, pid: Int(ssh), by: try me())
        var helper: Int32?
        for _ in 0..<500 where helper == nil {
            helper = ProcFile.text("/proc/\(ssh)/task/\(ssh)/children")?.split(separator: " ").first.flatMap { Int32($0) }
            if helper == nil { usleep(10_000) }
        }
        let knownHostsCommand = try pinned(try XCTUnwrap(helper, "the shell's child never started"))
        defer { kill(knownHostsCommand.pid, SIGKILL) }
        let keyA = "SHA256:" + String(repeating: "A", count: 43), keyB = "SHA256:" + String(repeating: "B", count: 43)
        try sessions.recordHostKey(session.id, fingerprint: keyA, by: knownHostsCommand)
        guard case .success(let served) = sessions.admit(try pinned(ssh), session: session.id) else {
            return XCTFail("one reported key: the session serves its ssh")
        }
        XCTAssertEqual(served.identity.kind, .forwarded(.init(name: "build-box", fingerprint: keyA, session: session.id)))
        XCTAssertEqual(served.via, "ssh:build-box")
        try sessions.recordHostKey(session.id, fingerprint: keyA, by: knownHostsCommand)
        guard case .success = sessions.admit(try pinned(ssh), session: session.id) else {
            return XCTFail("the same key again changes nothing")
        }
        try sessions.recordHostKey(session.id, fingerprint: keyB, by: knownHostsCommand)
        guard case .failure(let refused) = sessions.admit(try pinned(ssh), session: session.id) else {
            return XCTFail("served after two different host keys")
        }
        XCTAssertTrue(refused.message.contains("two different host keys"), refused.message)
    }
}
