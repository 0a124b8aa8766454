@testable import AgentService
import AgentIPC
@testable import AgentAccess
import AuthCore
import AuthTestSupport
import Foundation
import Logging
import XCTest

final class AgentOperationsTests: XCTestCase {
    /// Every domain error has its own stable wire code (and so its own D-Bus error name).
    /// An account name or a path a caller chose goes into the request log's fields as it is shown everywhere else:
    /// no control character starts a line of its own in the log, no bidi mark reorders it (SECURITY.md).
    func testWhatACallerChoseIsShownSafelyInTheRequestLog() {
        let caller = Caller(pid: 1, uid: getuid(), via: "socket", exe: "/tmp/x\u{202E}gpj.exe\nfake line")
        let meta = AgentOperations.requestMetadata(.token, account: "zz\u{7}\nINJECTED token granted", caller: caller)
        for key in ["account", "peer_exe"] {
            let text = "\(meta[key] ?? "")"
            XCTAssertFalse(text.contains("\n") || text.contains("\u{7}") || text.contains("\u{202E}"), "\(key): \(text)")
        }
        XCTAssertTrue("\(meta["account"] ?? "")".hasPrefix("zz"))
    }

    func testEveryAuthErrorCodeMapsOntoItsWireCode() {
        for code in AuthError.Code.allCases {
            XCTAssertEqual(AgentOperations.wireCode(code).rawValue, code.rawValue, "\(code)")
        }
    }

    /// Issue 35: `status --json` says that a sign-in ended in a field of its own, as the human output does, rather
    /// than leaving a script to compare `sign_in_valid_until` with its own clock; `signed_in` stays true while the
    /// refresh token is kept.
    func testStatusSaysWhetherTheSignInEnded() async throws {
        let account = AccountConfig(name: "work", issuer: URL(string: "https://issuer.example")!, clientID: "client-1",
                                    scopes: ["read"])
        let other = AccountConfig(name: "home", issuer: URL(string: "https://issuer.example")!, clientID: "client-2",
                                  scopes: ["read"])
        let clock = ManualClock()
        let now = clock.wallClock()
        let store = MemorySecretStore(entries: [
            SecretKey(account): KeyringItem(secret: Secret("rt-1"), validUntil: now - 60),
            SecretKey(other): KeyringItem(secret: Secret("rt-2"), validUntil: now + 86400),
        ])
        let broker = TokenBroker(accounts: [account, other], store: store, http: NoHTTP(), redirects: NoRedirects(),
                                 browser: NoBrowser(), time: clock, logger: Logger(label: "test"))
        _ = await broker.checkSignInLifetimes()
        let operations = AgentOperations(broker: broker, info: AgentInfo(version: "9.9.9", pid: 42, startedAt: .now,
                                                                         socketPath: "/run/x.sock"),
                                         logger: Logger(label: "test"))
        let json = try JSONEncoder().encode(await operations.status(caller: Caller(pid: 1, uid: 1000, via: "socket")))
        let object = try XCTUnwrap(JSONSerialization.jsonObject(with: json) as? [String: Any])
        let accounts = try XCTUnwrap(object["accounts"] as? [[String: Any]])
        XCTAssertEqual(accounts[0]["signed_in"] as? Bool, true)
        XCTAssertEqual(accounts[0]["sign_in_ended"] as? Bool, true, "ended: \(accounts[0].keys.sorted())")
        XCTAssertEqual(accounts[1]["sign_in_ended"] as? Bool, false, "still valid")
    }

    /// Issue 54: `status` from a host through a forward showed the desktop's socket path and keyring. A confined
    /// caller is told how the agent sees it (`view`, `named_by`) and is not shown what belongs to the desktop (the
    /// agent's pid, socket, keyring and store); a program of the desktop sees them as before.
    func testAConfinedCallersStatusSaysWhatItIsAndHidesTheDesktops() async throws {
        let broker = TokenBroker(accounts: [], store: MemorySecretStore(items: [:]), http: NoHTTP(), redirects: NoRedirects(),
                                 browser: NoBrowser(), time: ManualClock(), logger: Logger(label: "test"))
        let operations = AgentOperations(broker: broker, info: AgentInfo(version: "9.9.9", pid: 42, startedAt: .now,
                                                                         socketPath: "/run/x.sock", hostname: "desk-1"),
                                         logger: Logger(label: "test"))
        func status(_ kind: ClientIdentity.Kind?) async throws -> [String: Any] {
            var caller = Caller(pid: 1, uid: 1000, via: "socket")
            if let kind { caller.identity.kind = kind }
            let json = try JSONEncoder().encode(await operations.status(caller: caller))
            return try XCTUnwrap(JSONSerialization.jsonObject(with: json) as? [String: Any])
        }
        let desktopOwn = ["pid", "socket", "keyring", "store"]

        let host = try await status(.forwarded(.init(name: "build-box", fingerprint: "SHA256:abc", session: "s1")))
        XCTAssertEqual(host["view"] as? String, "ssh_host")
        XCTAssertEqual(host["named_by"] as? String, "ssh:build-box")
        let hostAgent = try XCTUnwrap(host["agent"] as? [String: Any])
        XCTAssertEqual(hostAgent["hostname"] as? String, "desk-1", "the host is told whose agent answers")
        for key in desktopOwn { XCTAssertNil(hostAgent[key], "a host is shown the desktop's \(key)") }
        XCTAssertNil(host["forwards"])

        let app = try await status(.flatpak(.init(id: "org.example.App")))
        XCTAssertEqual(app["view"] as? String, "flatpak")
        XCTAssertEqual(app["named_by"] as? String, "flatpak:org.example.App")
        let appAgent = try XCTUnwrap(app["agent"] as? [String: Any])
        for key in desktopOwn { XCTAssertNil(appAgent[key], "an app is shown the desktop's \(key)") }

        let desktop = try await status(nil)
        XCTAssertEqual(desktop["view"] as? String, "desktop")
        let desktopAgent = try XCTUnwrap(desktop["agent"] as? [String: Any])
        XCTAssertEqual(desktopAgent["socket"] as? String, "/run/x.sock")
        XCTAssertEqual(desktopAgent["pid"] as? Int, 42)
        XCTAssertNotNil(desktopAgent["keyring"])
    }

    /// Issue 48: a program may ask for a DPoP proof for any token (`authctl token --header --url`), but a Bearer token
    /// comes without one, so its grant's audit record names no proof.
    func testABearerGrantAskedForAProofIsAuditedWithoutOne() async throws {
        let account = AccountConfig(name: "gh", issuer: URL(string: "https://github.com")!, clientID: "client", scopes: ["repo"])
        let store = MemorySecretStore(items: [SecretKey(account): StoredCredential.longLivedAccessToken(Secret("gho_x")).stored])
        let broker = TokenBroker(accounts: [account], store: store, http: NoHTTP(), redirects: NoRedirects(),
                                 browser: NoBrowser(), logger: Logger(label: "test"))
        let operations = AgentOperations(broker: broker, info: AgentInfo(version: "9.9.9", pid: 42, startedAt: .now,
                                                                         socketPath: "/run/x.sock"),
                                         logger: Logger(label: "test"))
        let request = WireRequest(op: .token) { $0.dpopMethod = "GET"; $0.dpopURL = "https://api.example/resource" }
        let result = try await operations.token(account: "gh", request, caller: Caller(pid: 1, uid: 1000, via: "socket"))
        XCTAssertNil(result.dpopProof, "a Bearer token has no proof")
        let entries = operations.access.audit.entries(account: "gh")
        XCTAssertEqual(entries.count, 1)
        XCTAssertEqual(entries.first?.outcome, "granted")
        XCTAssertNil(entries.first?.proofFor, "no proof was made, so none is audited")
    }

    /// Issue 53: a token request naming no configured account is `unknown_account`, and one naming no possible
    /// account `bad_request`, before the caller is judged: a sandboxed app (here this process, named as one) is
    /// asked about by no question and leaves no audit record. Before: a name that was no account was an open
    /// account, and each new name raised a question about the app.
    func testATokenRequestForNoAccountIsRefusedBeforeAnyoneIsAsked() async throws {
        let account = AccountConfig(name: "work", issuer: URL(string: "https://issuer.example")!, clientID: "client", scopes: ["read"])
        let broker = TokenBroker(accounts: [account], store: MemorySecretStore(), http: NoHTTP(), redirects: NoRedirects(),
                                 browser: NoBrowser(), logger: Logger(label: "test"))
        // A time limit that passes at once: a question, if one were asked, would end as `consent_timeout`.
        let gate = AccessGate(policies: ["work": .open], logger: Logger(label: "test"), sleep: { _ in })
        let operations = AgentOperations(broker: broker, info: AgentInfo(version: "9.9.9", pid: 42, startedAt: .now,
                                                                         socketPath: "/run/x.sock"),
                                         access: gate, logger: Logger(label: "test"))
        var app = Caller.identify(peer: PeerCredentials(pid: getpid(), uid: getuid(), gid: getgid()), via: "socket")
        app.identity.kind = .flatpak(.init(id: "org.example.App"))
        XCTAssertTrue(app.identity.isConfined, "the premise")
        for (name, code) in [("nope", ErrorCode.unknownAccount), ("nope-2", .unknownAccount), ("../work", .badRequest),
                             ("", .badRequest), (String(repeating: "a", count: 65), .badRequest)] {
            do {
                _ = try await operations.token(account: name, WireRequest(op: .token), caller: app)
                XCTFail("served \(name)")
            } catch {
                XCTAssertEqual(error.knownCode, code, "\(name): \(error.message)")
            }
        }
        XCTAssertEqual(gate.audit.entries().count, 0, "nobody was judged or asked")
        do {
            _ = try await operations.token(account: "work", WireRequest(op: .token), caller: app)
            XCTFail("a sandboxed app was served without a question")
        } catch {
            XCTAssertEqual(error.knownCode, .accessDenied, "a configured account still asks: \(error.message)")
        }
        XCTAssertEqual(gate.audit.entries().map(\.reason), ["consent_timeout"])
    }
}
