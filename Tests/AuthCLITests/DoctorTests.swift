import AgentIPC
@testable import AuthCLI
import XCTest

final class DoctorTests: XCTestCase {
    /// The TPM line: ok when it answers; a failure for `dpop_key = "tpm"`, a warning for `auto` (software keys meanwhile),
    /// with the group hint when the agent named the group as the reason.
    func testTheTPMLineFailsOnlyWhereAnAccountNeedsTheTPM() {
        let ok = Doctor.tpm(DiagnoseResult.TPM(tcti: "device:/dev/tpmrm0", required: true, problem: nil))
        XCTAssertEqual(ok.status, .ok)
        XCTAssertEqual(ok.message, "the TPM at device:/dev/tpmrm0 answers")
        let group = DiagnoseResult.Problem(code: "tpm_unavailable", message: "no TPM answers at device:/dev/tpmrm0: /dev/tpmrm0 is there but you may not open it: add yourself to its group (`sudo usermod -aG tss $USER`, then log in again)")
        let required = Doctor.tpm(DiagnoseResult.TPM(tcti: "device:/dev/tpmrm0", required: true, problem: group))
        XCTAssertEqual(required.status, .fail)
        XCTAssertTrue(required.hint?.contains("tss group") ?? false, required.hint ?? "")
        let gone = DiagnoseResult.Problem(code: "tpm_unavailable", message: "no TPM answers at swtpm:port=1 (tcti:IO failure)")
        let auto = Doctor.tpm(DiagnoseResult.TPM(tcti: "swtpm:port=1", required: false, problem: gone))
        XCTAssertEqual(auto.status, .warn)
        XCTAssertTrue(auto.message.hasSuffix("dpop_key = \"auto\" makes software keys meanwhile"), auto.message)
        XCTAssertTrue(auto.hint?.contains("tpm_tcti") ?? false)
    }

    func testTheDisplayIsTheAgentsView() {
        XCTAssertNil(Doctor.agentDisplay(display: nil, wayland: nil, source: nil, ssh: false), "the portal's business")
        let none = Doctor.agentDisplay(display: nil, wayland: nil, source: "user manager", ssh: false)
        XCTAssertEqual(none?.status, .warn)
        XCTAssertEqual(none?.message, "no DISPLAY or WAYLAND_DISPLAY in the user manager's environment: the browser the agent starts has no screen")
        XCTAssertTrue(none?.hint?.contains("systemctl --user import-environment DISPLAY WAYLAND_DISPLAY") == true)
        let wayland = Doctor.agentDisplay(display: ":0", wayland: "wayland-0", source: "user manager", ssh: false)
        XCTAssertEqual(wayland?.status, .ok)
        XCTAssertEqual(wayland?.message, "the browser the agent starts opens on WAYLAND_DISPLAY=wayland-0, DISPLAY=:0 (the user manager's environment)")
        XCTAssertEqual(Doctor.agentDisplay(display: ":0", wayland: nil, source: "agent", ssh: true)?.status, .warn)
    }

    func testClockSkewBounds() {
        XCTAssertEqual(Doctor.clock(account: "w", serverTime: 1000, agentTime: 1000).status, .ok)
        XCTAssertEqual(Doctor.clock(account: "w", serverTime: 1000, agentTime: 1060).status, .ok)
        let ahead = Doctor.clock(account: "w", serverTime: 1000, agentTime: 1061)
        XCTAssertEqual(ahead.status, .warn)
        XCTAssertEqual(ahead.message, "this machine's clock is 61 s ahead of the server's")
        XCTAssertNotNil(ahead.hint)
        let behind = Doctor.clock(account: "w", serverTime: 1000, agentTime: 699)
        XCTAssertEqual(behind.status, .fail)
        XCTAssertEqual(behind.message, "this machine's clock is 301 s behind the server's")
        XCTAssertEqual(Doctor.clock(account: "w", serverTime: nil, agentTime: 5).status, .warn)
    }

    func testKeyringStates() {
        XCTAssertEqual(Doctor.keyring("available").status, .ok)
        XCTAssertEqual(Doctor.keyring("locked").status, .fail)
        XCTAssertEqual(Doctor.keyring("absent").status, .fail)
        XCTAssertEqual(Doctor.keyring("error").status, .warn)
    }

    /// Issue 36: the check names the program that owns org.freedesktop.secrets, and gives the agent's advice, which
    /// is in that program's words (KeyringStoreTests: each product's words; authctl knows none).
    func testKeyringNamesTheSecretServiceAndGivesTheAgentsAdvice() {
        let keepassxc = "/usr/bin/keepassxc", unlock = "unlock the database in KeePassXC, or open it if none is open"
        XCTAssertEqual(Doctor.keyring("available", service: keepassxc).message,
                       "the Secret Service is available and unlocked (org.freedesktop.secrets: /usr/bin/keepassxc)")
        let locked = Doctor.keyring("locked", service: keepassxc, advice: unlock)
        XCTAssertEqual(locked.status, .fail)
        XCTAssertEqual(locked.message, "the Secret Service is locked, or has no collection open (org.freedesktop.secrets: /usr/bin/keepassxc)")
        XCTAssertEqual(locked.hint, unlock + "; tokens cannot be read or saved meanwhile")
        let absent = Doctor.keyring("absent", advice: "start one", store: "auto", keptInMemory: ["work"])
        XCTAssertEqual(absent.map(\.status), [.warn, .warn])
        XCTAssertEqual(absent.first?.hint, "start one")
    }

    func testAgentVersionAndProtocol() {
        let same = Doctor.agent(PingResult(agentVersion: "0.1.0"), socket: "/s", authctlVersion: "0.1.0")
        XCTAssertEqual(same.map(\.status), [.ok, .ok])
        let newer = Doctor.agent(PingResult(agentVersion: "0.2.0"), socket: "/s", authctlVersion: "0.1.0")
        XCTAssertEqual(newer.map(\.status), [.ok, .warn])
        let other = Doctor.agent(PingResult(agentVersion: "9", protocolVersion: 2), socket: "/s", authctlVersion: "0.1.0")
        XCTAssertEqual(other.last?.status, .fail)
        XCTAssertEqual(other.last?.message, "the agent speaks protocol 2, authctl speaks 1")
    }

    func testBrowserAndSession() {
        XCTAssertEqual(Doctor.browser(program: "/usr/bin/xdg-open", source: "xdg-open", problem: nil, fromAgent: true).message,
                       "the agent starts /usr/bin/xdg-open (xdg-open)")
        let missing = Doctor.browser(program: nil, source: nil, problem: "no browser found", fromAgent: false)
        XCTAssertEqual(missing.status, .warn)
        XCTAssertTrue(missing.message.hasPrefix("an agent started from this shell finds no browser"))
        XCTAssertEqual(Doctor.session(ssh: true, headless: false).status, .warn)
        XCTAssertTrue(Doctor.session(ssh: true, headless: true).hint?.contains("--no-browser") ?? false)
        XCTAssertEqual(Doctor.session(ssh: false, headless: false).status, .ok)
    }

    func testConfigFile() {
        XCTAssertEqual(Doctor.config(path: "/c", mode: 0o600, ownedByUser: true), DoctorCheck("config", .ok, "/c (mode 600, yours)"))
        XCTAssertEqual(Doctor.config(path: "/c", mode: 0o664, ownedByUser: true).status, .fail)
        XCTAssertEqual(Doctor.config(path: "/c", mode: 0o644, ownedByUser: false).status, .fail)
        XCTAssertEqual(Doctor.config(path: "/c", mode: nil, ownedByUser: false).status, .warn)
    }

    func testAccountChecksFromTheAgentsDiagnosis() {
        let good = DiagnoseResult.Account(name: "work", issuer: "https://i", endpointsConfigured: false,
                                          tokenEndpoint: "https://i/token", jwksURI: "https://i/jwks", signingKeys: 1,
                                          serverTime: 100, agentTime: 101)
        let checks = Doctor.account(good)
        XCTAssertEqual(checks.map(\.check), ["metadata", "signing keys", "clock"])
        XCTAssertEqual(checks.map(\.status), [.ok, .ok, .ok])
        XCTAssertEqual(Set(checks.compactMap(\.account)), ["work"])

        let bad = DiagnoseResult.Account(name: "work", issuer: "https://i", endpointsConfigured: false,
                                         error: .init(code: "invalid_metadata", message: "the discovery document names issuer 'x'"))
        let failed = Doctor.account(bad)
        XCTAssertEqual(failed.first?.status, .fail)
        XCTAssertTrue(failed.first?.hint?.contains("issuer") ?? false)
        XCTAssertEqual(failed.count, 2, "no keys line without metadata; the clock line says it was not compared")
    }

    func testReportFailsOnlyOnFailures() throws {
        let warned = DoctorReport(checks: [DoctorCheck("a", .ok, "x"), DoctorCheck("b", .warn, "y"), DoctorCheck("c", .skip, "z")])
        XCTAssertTrue(warned.ok)
        XCTAssertEqual(warned.summary, "1 warning.")
        let failed = DoctorReport(checks: [DoctorCheck("a", .fail, "x"), DoctorCheck("b", .fail, "y"), DoctorCheck("c", .warn, "z")])
        XCTAssertFalse(failed.ok)
        XCTAssertEqual(failed.summary, "2 failures, 1 warning.")
        XCTAssertEqual(DoctorReport(checks: [DoctorCheck("a", .ok, "x")]).summary, "All checks passed.")
        let json = String(decoding: try JSONEncoder().encode(DoctorCheck("clock", account: "w", .warn, "m", hint: "h")), as: UTF8.self)
        for key in ["\"check\":\"clock\"", "\"account\":\"w\"", "\"status\":\"warn\"", "\"message\":\"m\"", "\"hint\":\"h\""] {
            XCTAssertTrue(json.contains(key), json)
        }
    }
}

/// Issue 54, item 2/7: doctor says when a pinned `ssh:` entry can no longer match its host, because the host
/// (named as typed, or as ssh checks its key) presented another key and was refused.
final class DoctorHostKeyTests: XCTestCase {
    func testAPinWhoseHostPresentedAnotherKeyIsWarnedAboutOnce() {
        let (old, new) = ("SHA256:" + String(repeating: "A", count: 43), "SHA256:" + String(repeating: "B", count: 43))
        func refusal(_ account: String, alias: String?, key: String, reason: String = "not_listed") -> AuditEntry {
            var caller = WireCaller(pid: 1, via: "ssh:\(alias ?? "127.0.0.1:22022")", kind: .sshHost, exe: "/usr/bin/ssh")
            (caller.host, caller.hostAlias, caller.hostKey) = ("127.0.0.1:22022", alias, key)
            return AuditEntry(time: 1, account: account, outcome: AuditEntry.denied, reason: reason, caller: caller)
        }
        let audit = [refusal("work", alias: "build-box", key: new), refusal("work", alias: "build-box", key: new),
                     refusal("work", alias: nil, key: new), refusal("other", alias: "build-box", key: new),
                     refusal("work", alias: "build-box", key: new, reason: "denied_by_user")]
        let checks = Doctor.changedHostKeys(audit, allowedClients: [
            "work": ["ssh:build-box@\(old)", "ssh:127.0.0.1:22022@\(new)", "ssh:elsewhere@\(old)"], "other": ["ssh:build-box"]])
        XCTAssertEqual(checks.count, 1, "\(checks)")
        XCTAssertEqual(checks.first?.account, "work")
        XCTAssertEqual(checks.first?.status, .warn)
        XCTAssertEqual(checks.first?.message,
                       "ssh:build-box is pinned to \(old), but build-box presented \(new) and was refused: its key changed, so the entry no longer serves it")
        XCTAssertTrue(checks.first?.hint?.contains("\"ssh:build-box@\(new)\"") == true)
        XCTAssertEqual(Doctor.changedHostKeys(audit, allowedClients: ["work": ["ssh:build-box@\(new)"]]), [], "re-pinned")
    }

    func testAnEntryThatCanNeverMatchIsWarnedAbout() {
        let checks = Doctor.neverMatching(account: "work", ["ssh:build-box:22 never matches: ssh names a host on port 22 without :22; write ssh:build-box"])
        XCTAssertEqual(checks.map(\.status), [.warn])
        XCTAssertEqual(checks.first?.account, "work")
        XCTAssertTrue(checks.first?.message.hasPrefix("ssh:build-box:22 never matches") == true)
        XCTAssertEqual(Doctor.neverMatching(account: "work", []), [])
    }
}
