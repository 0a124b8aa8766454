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

    /// The notification's text: the account and the caller as the agent describes it (``WireCaller/described(withPID:)``),
    /// never a token; what the caller's kind means for the answer (an app chooses its own id; root on a host can use
    /// what it gets; a host allowed before under another key, that its key changed, from which to which). Notification
    /// servers render a subset of markup in the body, so the whole text is escaped.
    static func text(_ request: PendingConsent) -> (summary: String, body: String) {
        let caller = request.caller
        // How to answer, for every caller: "this run" is its Flatpak instance or its ssh session (`run` says which).
        let answer = "Allow it, or run: authctl approve \(request.id) (authctl deny \(request.id) refuses)."
            + (request.run.map { " \"Allow this run\" (authctl approve --this-run \(request.id)) allows \($0) only." } ?? "")
        let installed = request.appName.map { " (\"\(WireCaller.shown($0))\" as installed here)" } ?? ""
        let warning = switch WireCaller.Kind(rawValue: caller.kind) {
        case .flatpak?: caller.notContained == nil
            ? " An app chooses its own id, so another app can use the same name."
            : " Its sandbox has holes that let it do what any program of yours can. An app chooses its own id, so another app can use the same name."
        case .sshHost?: " Whoever is root there can use them while the session lasts."
        default: ""
        }
        let account = WireCaller.shown(request.account)
        let isHost = caller.kind == WireCaller.Kind.sshHost.rawValue
        let hostName = WireCaller.shown(caller.hostAlias ?? caller.host ?? "?")
        let client = isHost ? "the host \(hostName)" : WireCaller.shown(request.client)
        // A host allowed before under another key: the key changed, or someone else answers under its name.
        let changed = request.previousHostKey.map { previous in
            " Its host key changed: you allowed \(hostName) before with host key \(WireCaller.shown(previous)), and it now "
                + "presents \(WireCaller.shown(caller.hostKey ?? "?")). Allow it only if you expected the change (the host was "
                + "reinstalled or its key replaced); if not, someone else may answer as \(hostName)."
        } ?? ""
        // The summary is plain text to notification servers; the body may hold markup. A host's pid is the local ssh's.
        return ("Allow \(client)\(changed.isEmpty ? "" : ", whose host key changed,") to use \(account)?",
                escaped("\(caller.described(withPID: !isHost))\(installed) asks for tokens of the account '\(account)'.\(changed)\(warning) \(answer)"))
    }

    /// `text` with the markup characters notification servers interpret escaped.
    static func escaped(_ text: String) -> String {
        var out = ""
        for character in text {
            switch character {
            case "&": out += "&amp;"
            case "<": out += "&lt;"
            case ">": out += "&gt;"
            default: out.append(character)
            }
        }
        return out
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
