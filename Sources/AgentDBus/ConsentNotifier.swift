import AgentIPC
import AgentServer
import AuthCore
import CAgentBus
import Foundation
import Logging

/// Asks the user about a first-use request with a desktop notification: "Allow" and "Deny" actions where the
/// notification server supports actions, else the text alone (which names `authctl approve ID`). An action is
/// taken only from the server that showed the notification, for a question still open; the answer goes to
/// ``AccessGate/answer(_:allow:approver:)`` like `authctl approve`. The notification is closed when the question
/// ends (answered anywhere, or timed out). Bus calls are asynchronous, as in ``SignInNotifier``.
final class ConsentNotifier: ConsentPrompter, @unchecked Sendable {
    static let allowKey = "consent-allow"
    static let denyKey = "consent-deny"

    private let access: AccessGate
    private let loop: BusLoop
    private let logger: Logger
    // Bus thread only: notification id -> (question id, the server's unique name).
    fileprivate var shown: [UInt32: (request: Int, server: String)] = [:]
    // Bus thread only: questions that ended before their notification's id came back.
    fileprivate var ended: Set<Int> = []

    init(access: AccessGate, loop: BusLoop, logger: Logger) {
        self.access = access
        self.loop = loop
        self.logger = logger
    }

    /// The notification's text: the account, the program and the command, never a token.
    /// A request relayed by authctl names the chain (`/usr/bin/msmtp via dash via authctl`): the program is asked
    /// about, and the pid is authctl's.
    static func text(_ request: PendingConsent) -> (summary: String, body: String) {
        let who = request.caller.relayedBy.map { "\(request.client) \(ClientIdentity.via($0))" } ?? request.client
        return ("Allow \(request.client) to use \(request.account)?",
                "\(who) (pid \(request.caller.pid)) asks for tokens of the account '\(request.account)'. "
                    + "Allow it, or run: authctl approve \(request.id) (authctl deny \(request.id) refuses).")
    }

    /// Bus thread: watch for the actions (`context` is an unretained ConsentNotifier that outlives the bus).
    static func watchActions(bus: OpaquePointer, context: UnsafeMutableRawPointer) -> Int32 {
        aa_bus_notifications_match_action(bus, ConsentNotifier.actionInvoked, context)
    }

    func ask(_ request: PendingConsent) {
        loop.submit { [self] bus in
            let call = Unmanaged.passRetained(Call(notifier: self, request: request)).toOpaque()
            if aa_bus_notifications_get_capabilities(bus, ConsentNotifier.capabilitiesReply, call) < 0 {
                Unmanaged<Call>.fromOpaque(call).release()
            }
        }
    }

    func withdraw(_ id: Int) {
        loop.submit { [self] bus in
            guard let notification = shown.first(where: { $0.value.request == id })?.key else {
                ended.insert(id)
                return
            }
            shown[notification] = nil
            _ = aa_bus_notifications_close(bus, notification)
        }
    }

    final class Call {
        let notifier: ConsentNotifier
        let request: PendingConsent
        init(notifier: ConsentNotifier, request: PendingConsent) {
            self.notifier = notifier
            self.request = request
        }

        static func answered(_ message: OpaquePointer, _ context: UnsafeMutableRawPointer) -> Call? {
            let call = Unmanaged<Call>.fromOpaque(context).takeRetainedValue()
            if let error = sd_bus_message_get_error(message), sd_bus_error_is_set(error) != 0 {
                call.notifier.ended.remove(call.request.id)  // nothing shown, nothing to close later
                let name = error.pointee.name.map { String(cString: $0) } ?? "unknown"
                call.notifier.logger.info("no consent notification shown (no notification server?); authctl approve still works",
                                          metadata: ["account": "\(call.request.account)", "dbus_error": "\(name)"])
                return nil
            }
            return call
        }
    }

    private static let capabilitiesReply: sd_bus_message_handler_t = { message, context, _ in
        guard let message, let context, let call = Call.answered(message, context) else { return 0 }
        let actions = aa_bus_read_has_string(message, "actions") > 0
        let (summary, body) = ConsentNotifier.text(call.request)
        let labels = actions ? [allowKey, "Allow", denyKey, "Deny"] : []
        var pointers: [UnsafeMutablePointer<CChar>?] = labels.map { strdup($0) } + [nil]
        defer { pointers.forEach { free($0) } }
        let next = Unmanaged.passRetained(call).toOpaque()
        let r = pointers.withUnsafeMutableBufferPointer { buffer in
            aa_bus_notifications_notify_actions(sd_bus_message_get_bus(message), SignInNotifier.appName, summary, body,
                                                buffer.baseAddress, ConsentNotifier.notifyReply, next)
        }
        if r < 0 {
            Unmanaged<Call>.fromOpaque(next).release()
            call.notifier.logger.info("cannot send the consent notification", metadata: ["errno": "\(-r)"])
        }
        return 0
    }

    private static let notifyReply: sd_bus_message_handler_t = { message, context, _ in
        guard let message, let context, let call = Call.answered(message, context) else { return 0 }
        let notifier = call.notifier
        guard let id = BusMessage.readUInt32(message), let sender = sd_bus_message_get_sender(message) else { return 0 }
        if notifier.ended.remove(call.request.id) != nil {
            _ = aa_bus_notifications_close(sd_bus_message_get_bus(message), id)
            return 0
        }
        notifier.shown[id] = (call.request.id, String(cString: sender))
        notifier.logger.info("consent notification shown", metadata: ["account": "\(call.request.account)", "request": "\(call.request.id)"])
        return 0
    }

    private static let actionInvoked: sd_bus_message_handler_t = { message, context, _ in
        guard let message, let context, let id = BusMessage.readUInt32(message),
              let key = BusMessage.readString(message), key == allowKey || key == denyKey,
              let sender = sd_bus_message_get_sender(message) else { return 0 }
        let notifier = Unmanaged<ConsentNotifier>.fromOpaque(context).takeUnretainedValue()
        guard let shown = notifier.shown[id], shown.server == String(cString: sender) else { return 0 }
        // The entry stays until the question ends (withdraw closes the notification); a second click is too late.
        do {
            _ = try notifier.access.answer(shown.request, allow: key == allowKey, approver: nil)
        } catch {
            notifier.logger.info("a consent notification's answer came too late", metadata: ["request": "\(shown.request)"])
        }
        return 0
    }
}
