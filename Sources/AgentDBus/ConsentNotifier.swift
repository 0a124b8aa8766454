import AgentIPC
import AgentAccess
import AuthCore
import CAgentBus
import FoundationEssentials
import Logging
import Glibc

/// Asks the user about a first-use request with a desktop notification: "Allow" and "Deny" actions where the
/// notification server supports actions, else the text alone (which names `authctl approve ID`). An action is
/// taken only from the server that showed the notification (``NotificationClient`` checks), for a question still
/// open; the answer goes to ``AccessGate/answer(_:allow:approver:)`` like `authctl approve`. The notification is
/// closed when the question ends (answered anywhere, or timed out).
final class ConsentNotifier: ConsentPrompter, @unchecked Sendable {
    static let allowKey = "consent-allow"
    static let denyKey = "consent-deny"
    /// Offered when the caller has a run (a Flatpak instance, an ssh session): allowed for it alone, not remembered.
    static let allowRunKey = "consent-allow-run"

    private let access: AccessGate
    private let client: NotificationClient
    private let loop: BusLoop
    private let logger: Logger
    // Bus thread only: question id -> its notification, until the question ends or the notification is closed.
    private var shown: [Int: NotificationHandle] = [:]

    init(access: AccessGate, client: NotificationClient, loop: BusLoop, logger: Logger) {
        self.access = access
        self.client = client
        self.loop = loop
        self.logger = logger
    }

    /// The notification's text: the account, the program and the command, never a token.
    /// A request relayed by authctl names the chain (`/usr/bin/msmtp via dash via authctl`): the program is asked
    /// about, and the pid is authctl's.
    /// A sandboxed app is said to be one ("sandboxed", or "not contained" with the holes that make it as able as a
    /// program of yours), with a warning that its id is its own choice.
    static func text(_ request: PendingConsent) -> (summary: String, body: String) {
        let who = request.caller.relayedBy.map { "\(request.client) \(ClientIdentity.via($0))" } ?? request.client
        // How to answer, for every caller: "this run" is its Flatpak instance or its ssh session (`run` says which).
        let answer = "Allow it, or run: authctl approve \(request.id) (authctl deny \(request.id) refuses)."
            + (request.run.map { " \"Allow this run\" (authctl approve --this-run \(request.id)) allows \($0) only." } ?? "")
        // A forwarded host: its name and key, and what it says runs there (not verified); the pid is the local ssh's.
        if request.caller.via.hasPrefix("ssh:"), let key = request.caller.hostKey {
            let host = request.caller.via.dropFirst(4)
            return ("Allow the host \(host) to use \(request.account)?",
                    "The host \(host), reached by your ssh (host key \(key))"
                        + (request.caller.remoteProgram.map { ", running \($0) (said by the host, not verified)," } ?? "")
                        + " asks for tokens of the account '\(request.account)'. Whoever is root there can use them while the session lasts. "
                        + answer)
        }
        var sandbox = ""
        if request.caller.flatpakApp != nil {
            let instance = request.caller.flatpakInstance.map { ", instance \($0)" } ?? ""
            if let holes = request.caller.notContained {
                sandbox = " (not contained\(instance): its sandbox allows \(holes.joined(separator: ", ")), so it can do what any program of yours can)"
            } else {
                sandbox = " (sandboxed\(instance))"
            }
        }
        let installed = request.appName.map { " (\"\($0)\" as installed here)" } ?? ""
        let named = request.caller.flatpakApp == nil ? "" : " An app chooses its own id, so another app can use the same name."
        return ("Allow \(request.client) to use \(request.account)?",
                "\(who)\(installed)\(sandbox) (pid \(request.caller.pid)) asks for tokens of the account '\(request.account)'.\(named) "
                    + answer)
    }

    func ask(_ request: PendingConsent) {
        loop.submit { [self] bus in
            let (summary, body) = ConsentNotifier.text(request)
            let notification = DesktopNotification(summary: summary, body: body, actions: [
                .init(key: ConsentNotifier.allowKey, label: request.run == nil ? "Allow" : "Allow always"),
            ] + (request.run == nil ? [] : [.init(key: ConsentNotifier.allowRunKey, label: "Allow this run")]) + [
                .init(key: ConsentNotifier.denyKey, label: "Deny"),
            ])
            let metadata: Logger.Metadata = ["account": "\(request.account)", "request": "\(request.id)"]
            shown[request.id] = client.send(notification, bus: bus, what: "consent", metadata: metadata,
                                             onAction: { [self] _, key in answer(request.id, key: key) },
                                             onClosed: { [self] _ in shown[request.id] = nil })
        }
    }

    func withdraw(_ id: Int) {
        loop.submit { [self] bus in
            guard let handle = shown.removeValue(forKey: id) else { return }
            client.close(handle, bus: bus)
        }
    }

    /// Bus thread. The notification stays until the question ends (withdraw closes it); a second click is too late.
    private func answer(_ request: Int, key: String) {
        guard [ConsentNotifier.allowKey, ConsentNotifier.allowRunKey, ConsentNotifier.denyKey].contains(key) else { return }
        do {
            _ = try access.answer(request, allow: key != ConsentNotifier.denyKey, thisRun: key == ConsentNotifier.allowRunKey,
                                  approver: nil)
        } catch {
            logger.info("a consent notification's answer came too late", metadata: ["request": "\(request)"])
        }
    }
}
