import AgentService
import AuthTestSupport
@testable import AgentDBus
import AgentIPC
import AgentAccess
import AuthCore
import Foundation
import Glibc
import Logging
import XCTest

/// Issue 53: a Flatpak app that may talk to the agent saw `AccountChanged` and `SignInRequired` for accounts
/// `ListAccounts` hides from it, since they were broadcast. Signals go to subscribers by name, each only about the
/// accounts it may learn of.
final class SignalRecipientTests: XCTestCase {
    static let app = "org.example.App"

    /// This test process as the bus object identifies a caller, pinned; with `flatpakApp` it stands for a sandboxed app
    /// behind its xdg-dbus-proxy.
    func me(flatpakApp: String? = nil) -> Caller {
        var caller = Caller.identify(peer: PeerCredentials(pid: getpid(), uid: getuid(), gid: getgid()), via: "dbus")
        if let flatpakApp { caller.identity.kind = .flatpak(.init(id: flatpakApp)) }
        return caller
    }

    func busObject() -> AgentBusObject {
        let issuer = URL(string: "https://issuer.example")!
        let accounts = ["work", "home"].map { AccountConfig(name: $0, issuer: issuer, clientID: "client-\($0)", scopes: ["read"]) }
        let broker = TokenBroker(accounts: accounts, store: MemorySecretStore(), http: NoHTTP(), redirects: NoRedirects(),
                                 browser: NoBrowser(), logger: Logger(label: "test"))
        // `work` serves the app; `home` has no policy, so the app would be asked about it: not served now.
        let access = AccessGate(policies: ["work": AccessPolicy(allowedClients: [.flatpak(Self.app)])], logger: Logger(label: "test"))
        let operations = AgentOperations(broker: broker, info: AgentInfo(version: "9.9.9", pid: 42, startedAt: .now,
                                                                         socketPath: "/run/x.sock"),
                                         access: access, logger: Logger(label: "test"))
        return AgentBusObject(operations: operations, loop: BusLoop(), activity: nil, logger: Logger(label: "test"))
    }

    func testSignalsGoOnlyToSubscribersThatMayLearnOfTheAccount() {
        let object = busObject()
        let app = me(flatpakApp: Self.app)
        XCTAssertTrue(app.identity.isConfined, "the premise")
        XCTAssertEqual(object.recipients(of: .accountChanged("work")), [], "nobody subscribed: nobody gets it")
        XCTAssertTrue(object.subscribers.subscribe(":1.7", caller: me()))
        XCTAssertTrue(object.subscribers.subscribe(":1.9", caller: app))

        XCTAssertEqual(object.recipients(of: .accountChanged("work")), [":1.7", ":1.9"])
        XCTAssertEqual(object.recipients(of: .signInRequired("work")), [":1.7", ":1.9"])
        XCTAssertEqual(object.recipients(of: .accountChanged("home")), [":1.7"], "the app was not given home")
        XCTAssertEqual(object.recipients(of: .signInRequired("home")), [":1.7"], "the app was not given home")
        XCTAssertEqual(object.recipients(of: .refreshStarted("work")), [], "no signal for this event")

        // The app's ListAccounts shows exactly what its signals may name.
        XCTAssertTrue(object.operations.mayLearnOf("work", caller: app))
        XCTAssertFalse(object.operations.mayLearnOf("home", caller: app))

        object.callerLeft(":1.7")
        XCTAssertEqual(object.recipients(of: .accountChanged("home")), [], "a subscriber that left the bus gets nothing")
        XCTAssertEqual(object.recipients(of: .accountChanged("work")), [":1.9"])
    }

    func testSubscribersAreBounded() {
        let subscribers = SignalSubscribers()
        for n in 0..<SignalSubscribers.capacity { XCTAssertTrue(subscribers.subscribe(":1.\(n)", caller: me())) }
        XCTAssertFalse(subscribers.subscribe(":2.0", caller: me()), "refused beyond the capacity")
        XCTAssertTrue(subscribers.subscribe(":1.0", caller: me()), "subscribing again is not another entry")
        subscribers.remove(":1.0")
        XCTAssertTrue(subscribers.subscribe(":2.0", caller: me()))
        XCTAssertEqual(subscribers.count, SignalSubscribers.capacity)
    }

    /// An app opening connection after connection (its proxy names each one apart) subscribes a quarter of the
    /// capacity at most: the desktop's own listeners still subscribe. Before: the app could take all 1,024.
    func testConfinedSubscribersShareAQuarterAndNeverKeepTheDesktopOut() {
        let subscribers = SignalSubscribers()
        let app = me(flatpakApp: Self.app)
        var taken = 0
        for n in 0..<SignalSubscribers.capacity where subscribers.subscribe(":1.\(n)", caller: app) { taken += 1 }
        XCTAssertEqual(taken, SignalSubscribers.confinedShare)
        XCTAssertTrue(subscribers.subscribe(":1.0", caller: app), "an app's own subscription renewed")
        for n in 0..<(SignalSubscribers.capacity - SignalSubscribers.confinedShare) {
            XCTAssertTrue(subscribers.subscribe(":2.\(n)", caller: me()), "the desktop's listener \(n)")
        }
        XCTAssertFalse(subscribers.subscribe(":3.0", caller: me()), "the capacity still holds")
    }
}
