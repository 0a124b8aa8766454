import AgentIPC
import AgentServer
import AuthCore
import CAgentBus
import Foundation
import Logging

/// When to show the "sign in" desktop notification: once per account when the broker says it must sign in, and
/// again only after a sign-in of that account finished (so a failing background caller does not spam the desktop).
/// Pure logic, no bus.
public struct SignInNotificationPolicy: Sendable, Equatable {
    private var shown: Set<String> = []

    public init() {}

    /// The account to notify about for `event`, or nil.
    public mutating func account(toNotifyFor event: BrokerEvent) -> String? {
        switch event {
        case .signInRequired(let account):
            return shown.insert(account).inserted ? account : nil
        case .signInFinished(let account):
            shown.remove(account)
            return nil
        default:
            return nil
        }
    }

    /// The notification's text: account names and the command only, never a token or a URL.
    public static func text(account: String) -> (summary: String, body: String) {
        ("Sign in to \(account)",
         "The account '\(account)' needs you to sign in again. Run: authctl login \(account)")
    }
}

/// Shows the sign-in notification the policy asks for (through ``NotificationClient``) and, when the user clicks
/// its "Sign in" action, starts the account's browser sign-in.
final class SignInNotifier: @unchecked Sendable {
    static let actionKey = "sign-in"

    private let operations: AgentOperations
    private let client: NotificationClient
    private let loop: BusLoop
    private let logger: Logger
    // Bus thread only.
    private var policy = SignInNotificationPolicy()

    init(operations: AgentOperations, client: NotificationClient, loop: BusLoop, logger: Logger) {
        self.operations = operations
        self.client = client
        self.loop = loop
        self.logger = logger
    }

    /// From any thread.
    func handle(_ event: BrokerEvent) {
        loop.submit { [self] bus in
            guard let account = policy.account(toNotifyFor: event) else { return }
            let (summary, body) = SignInNotificationPolicy.text(account: account)
            let notification = DesktopNotification(summary: summary, body: body,
                                                   actions: [.init(key: SignInNotifier.actionKey, label: "Sign in")])
            client.send(notification, bus: bus, what: "sign-in", metadata: ["account": "\(account)"]) { [self] handle, key in
                guard key == SignInNotifier.actionKey else { return }
                client.forget(handle)  // one sign-in per notification
                startSignIn(account)
            }
        }
    }

    /// The user clicked "Sign in": the same sign-in as `authctl login`; the agent waits for it itself.
    private func startSignIn(_ account: String) {
        let operations = self.operations
        let logger = self.logger
        logger.info("starting a sign-in from the desktop notification", metadata: ["account": "\(account)"])
        Task {
            do {
                _ = try await operations.login(account: account)
                logger.info("sign-in from the notification finished", metadata: ["account": "\(account)"])
            } catch {
                logger.notice("sign-in from the notification failed", metadata: ["account": "\(account)", "code": "\((error as? WireError)?.code ?? "unknown")"])
            }
        }
    }
}
