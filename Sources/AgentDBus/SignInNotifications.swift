import AgentIPC
import AgentServer
import AuthCore
import CAgentBus
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
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

/// The agent as a client of `org.freedesktop.Notifications` on the session bus (the bus thread's connection):
/// shows the sign-in notification the policy asks for and, when the user clicks its "Sign in" action, starts the
/// account's browser sign-in. Every bus call is asynchronous, so neither the bus thread nor the broker waits for the
/// notification server; with no server there is one info line per account and nothing else.
final class SignInNotifier: @unchecked Sendable {
    static let appName = "auth-agent"
    static let actionKey = "sign-in"

    private let operations: AgentOperations
    private let loop: BusLoop
    private let logger: Logger
    // Bus thread only.
    private var policy = SignInNotificationPolicy()
    /// Notifications shown: id -> (account, the server's unique name, which alone may invoke the action).
    private var shown: [UInt32: (account: String, server: String)] = [:]

    init(operations: AgentOperations, loop: BusLoop, logger: Logger) {
        self.operations = operations
        self.loop = loop
        self.logger = logger
    }

    /// Bus thread: watch for the action (`context` is an unretained SignInNotifier that outlives the bus).
    static func watchActions(bus: OpaquePointer, context: UnsafeMutableRawPointer) -> Int32 {
        aa_bus_notifications_match_action(bus, SignInNotifier.actionInvoked, context)
    }

    /// From any thread.
    func handle(_ event: BrokerEvent) {
        loop.submit { [self] bus in
            guard let account = policy.account(toNotifyFor: event) else { return }
            let call = Unmanaged.passRetained(PendingCall(notifier: self, account: account)).toOpaque()
            if aa_bus_notifications_get_capabilities(bus, SignInNotifier.capabilitiesReply, call) < 0 {
                Unmanaged<PendingCall>.fromOpaque(call).release()
            }
        }
    }

    final class PendingCall {
        let notifier: SignInNotifier
        let account: String
        init(notifier: SignInNotifier, account: String) {
            self.notifier = notifier
            self.account = account
        }

        /// Takes back the call's context from a reply; nil (after the log line) when the reply is an error.
        static func answered(_ message: OpaquePointer, _ context: UnsafeMutableRawPointer) -> PendingCall? {
            let call = Unmanaged<PendingCall>.fromOpaque(context).takeRetainedValue()
            if let error = sd_bus_message_get_error(message), sd_bus_error_is_set(error) != 0 {
                call.notifier.unavailable(account: call.account, error: error)
                return nil
            }
            return call
        }
    }

    private static let capabilitiesReply: sd_bus_message_handler_t = { message, context, _ in
        guard let message, let context, let call = PendingCall.answered(message, context) else { return 0 }
        let notifier = call.notifier
        let actions = aa_bus_read_has_string(message, "actions") > 0
        let (summary, body) = SignInNotificationPolicy.text(account: call.account)
        let next = Unmanaged.passRetained(call).toOpaque()
        let r = aa_bus_notifications_notify(sd_bus_message_get_bus(message), appName, summary, body,
                                            actions ? actionKey : nil, actions ? "Sign in" : nil,
                                            SignInNotifier.notifyReply, next)
        if r < 0 {
            Unmanaged<PendingCall>.fromOpaque(next).release()
            notifier.logger.info("cannot send the sign-in notification", metadata: ["account": "\(call.account)", "errno": "\(-r)"])
        }
        return 0
    }

    private static let notifyReply: sd_bus_message_handler_t = { message, context, _ in
        guard let message, let context, let call = PendingCall.answered(message, context) else { return 0 }
        let notifier = call.notifier
        guard let id = BusMessage.readUInt32(message), let sender = sd_bus_message_get_sender(message) else { return 0 }
        notifier.shown[id] = (call.account, String(cString: sender))
        notifier.logger.info("sign-in notification shown", metadata: ["account": "\(call.account)"])
        return 0
    }

    private static let actionInvoked: sd_bus_message_handler_t = { message, context, _ in
        guard let message, let context, let id = BusMessage.readUInt32(message),
              let key = BusMessage.readString(message), key == actionKey,
              let sender = sd_bus_message_get_sender(message) else { return 0 }
        let notifier = Unmanaged<SignInNotifier>.fromOpaque(context).takeUnretainedValue()
        guard let shown = notifier.shown[id], shown.server == String(cString: sender) else { return 0 }
        notifier.shown[id] = nil
        notifier.startSignIn(shown.account)
        return 0
    }

    fileprivate func unavailable(account: String, error: UnsafePointer<sd_bus_error>) {
        let name = error.pointee.name.map { String(cString: $0) } ?? "unknown"
        logger.info("no desktop notification shown (no notification server?)",
                    metadata: ["account": "\(account)", "dbus_error": "\(name)"])
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
