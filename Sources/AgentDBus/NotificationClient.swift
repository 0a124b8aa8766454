import CAgentBus
import FoundationEssentials
import Logging
import Glibc

/// A notification to show: text, buttons, urgency, and which of our earlier notifications it replaces. Bus thread only.
struct DesktopNotification {
    struct Action: Sendable, Equatable {
        let key: String
        let label: String
    }

    /// The specification's `urgency` hint.
    enum Urgency: Int32, Sendable {
        case low = 0, normal = 1, critical = 2
    }

    var summary: String
    var body: String
    /// Sent only when the server lists the "actions" capability; the body must say what to do without them.
    var actions: [Action] = []
    var urgency: Urgency?
    /// Replaces this earlier notification in place (the server may have closed it: it then shows a new one).
    var replaces: NotificationHandle?
}

/// One notification sent by ``NotificationClient``; the sender keeps it to close or replace it. Bus thread only.
final class NotificationHandle {
    /// The server's id, once its reply came.
    fileprivate(set) var id: UInt32?
    /// The unique name of the server that showed it: the only sender whose signals about it count.
    fileprivate var server: String?
    fileprivate var closeRequested = false
    /// The server answered its `Notify` (with an id, or an error), or it was given up before that.
    fileprivate var settled = false
    /// A notification that replaces this one, held until this one's id is known: sent now, it would replace nothing
    /// and show beside it.
    fileprivate var successor: NotificationClient.Call?
    fileprivate let onAction: (NotificationHandle, String) -> Void
    fileprivate let onClosed: (NotificationHandle) -> Void
    fileprivate let what: String
    fileprivate let metadata: Logger.Metadata

    fileprivate init(what: String, metadata: Logger.Metadata, onAction: @escaping (NotificationHandle, String) -> Void,
                     onClosed: @escaping (NotificationHandle) -> Void) {
        self.what = what
        self.metadata = metadata
        self.onAction = onAction
        self.onClosed = onClosed
    }
}

/// The agent's one client of `org.freedesktop.Notifications` on the session bus (the bus thread's connection), for
/// the sign-in, consent and sign-in-lifetime notifications. Asks for the capabilities, then `Notify`; hands an
/// `ActionInvoked` to the handle's `onAction` only when it comes from the server that showed that notification, and
/// forgets a notification on `NotificationClosed`. Every call is asynchronous, so neither the bus thread nor the
/// broker waits for the server; with no server there is one info line per notification and nothing else.
final class NotificationClient: @unchecked Sendable {
    static let appName = "auth-agent"

    private let logger: Logger
    // Bus thread only: notifications shown and not yet closed or forgotten, by id.
    private var open: [UInt32: NotificationHandle] = [:]

    init(logger: Logger) {
        self.logger = logger
    }

    /// Bus thread: watch for actions and closings (`context` is an unretained NotificationClient that outlives the
    /// bus). Returns a negative errno on failure.
    static func watch(bus: OpaquePointer, context: UnsafeMutableRawPointer) -> Int32 {
        let r = aa_bus_notifications_match_action(bus, NotificationClient.actionInvoked, context)
        return r < 0 ? r : aa_bus_notifications_match_closed(bus, NotificationClient.closed, context)
    }

    /// Bus thread: shows `notification`. `what` names it in log lines ("sign-in", "consent"), with `metadata`
    /// (account names and ids only, never a secret). `onAction` gets the handle and the action key.
    @discardableResult
    func send(_ notification: DesktopNotification, bus: OpaquePointer, what: String, metadata: Logger.Metadata,
              onAction: @escaping (NotificationHandle, String) -> Void = { _, _ in },
              onClosed: @escaping (NotificationHandle) -> Void = { _ in }) -> NotificationHandle {
        let handle = NotificationHandle(what: what, metadata: metadata, onAction: onAction, onClosed: onClosed)
        let call = Call(client: self, handle: handle, notification: notification)
        if let earlier = notification.replaces, !earlier.settled {
            // A replacement of one not yet shown waits for its id (a later one takes its place).
            earlier.successor = call
        } else {
            start(call, bus: bus)
        }
        return handle
    }

    /// Bus thread: asks for the capabilities, then `Notify` (``capabilitiesReply``).
    private func start(_ call: Call, bus: OpaquePointer) {
        let context = Unmanaged.passRetained(call).toOpaque()
        if aa_bus_notifications_get_capabilities(bus, NotificationClient.capabilitiesReply, context) < 0 {
            Unmanaged<Call>.fromOpaque(context).release()
            settle(call.handle, bus: bus)
        }
    }

    /// Bus thread: `handle`'s `Notify` is answered or given up: the notification waiting to replace it goes now.
    private func settle(_ handle: NotificationHandle, bus: OpaquePointer) {
        handle.settled = true
        guard let next = handle.successor else { return }
        handle.successor = nil
        start(next, bus: bus)
    }

    /// Bus thread: closes the notification, now or as soon as the server tells its id.
    func close(_ handle: NotificationHandle, bus: OpaquePointer) {
        guard let id = handle.id else {
            handle.closeRequested = true
            return
        }
        forget(handle)
        _ = aa_bus_notifications_close(bus, id)
    }

    /// Bus thread: no further actions of this notification are delivered (it stays on screen).
    func forget(_ handle: NotificationHandle) {
        if let id = handle.id, open[id] === handle { open[id] = nil }
    }

    fileprivate final class Call {
        let client: NotificationClient
        let handle: NotificationHandle
        let notification: DesktopNotification
        init(client: NotificationClient, handle: NotificationHandle, notification: DesktopNotification) {
            self.client = client
            self.handle = handle
            self.notification = notification
        }

        /// Takes back the call's context from a reply; nil (after the log line) when the reply is an error.
        static func answered(_ message: OpaquePointer, _ context: UnsafeMutableRawPointer) -> Call? {
            let call = Unmanaged<Call>.fromOpaque(context).takeRetainedValue()
            if let error = sd_bus_message_get_error(message), sd_bus_error_is_set(error) != 0 {
                let name = error.pointee.name.map { String(cString: $0) } ?? "unknown"
                var metadata = call.handle.metadata
                metadata["notification"] = "\(call.handle.what)"
                metadata["dbus_error"] = "\(name)"
                call.client.logger.info("no desktop notification shown (no notification server?)", metadata: metadata)
                call.client.settle(call.handle, bus: sd_bus_message_get_bus(message))
                return nil
            }
            return call
        }
    }

    private static let capabilitiesReply: sd_bus_message_handler_t = { message, context, _ in
        guard let message, let context, let call = Call.answered(message, context) else { return 0 }
        if call.handle.closeRequested {
            call.client.settle(call.handle, bus: sd_bus_message_get_bus(message))
            return 0
        }
        let withActions = aa_bus_read_has_string(message, "actions") > 0
        let notification = call.notification
        let labels = withActions ? notification.actions.flatMap { [$0.key, $0.label] } : []
        var pointers: [UnsafeMutablePointer<CChar>?] = labels.map { strdup($0) } + [nil]
        defer { pointers.forEach { free($0) } }
        let next = Unmanaged.passRetained(call).toOpaque()
        let r = pointers.withUnsafeMutableBufferPointer { buffer in
            aa_bus_notifications_notify(sd_bus_message_get_bus(message), appName, notification.replaces?.id ?? 0,
                                        notification.summary, notification.body, buffer.baseAddress,
                                        notification.urgency?.rawValue ?? -1, NotificationClient.notifyReply, next)
        }
        if r < 0 {
            Unmanaged<Call>.fromOpaque(next).release()
            var metadata = call.handle.metadata
            metadata["notification"] = "\(call.handle.what)"
            metadata["errno"] = "\(-r)"
            call.client.logger.info("cannot send the desktop notification", metadata: metadata)
            call.client.settle(call.handle, bus: sd_bus_message_get_bus(message))
        }
        return 0
    }

    private static let notifyReply: sd_bus_message_handler_t = { message, context, _ in
        guard let message, let context, let call = Call.answered(message, context) else { return 0 }
        let client = call.client, handle = call.handle, bus = sd_bus_message_get_bus(message)!
        defer { client.settle(handle, bus: bus) }
        guard let id = BusMessage.readUInt32(message), let sender = sd_bus_message_get_sender(message) else { return 0 }
        if let replaced = call.notification.replaces, replaced.id != id { client.forget(replaced) }
        handle.id = id
        handle.server = String(cString: sender)
        if handle.closeRequested {
            _ = aa_bus_notifications_close(bus, id)
            return 0
        }
        client.open[id] = handle
        client.logger.info("\(handle.what) notification shown", metadata: handle.metadata)
        return 0
    }

    /// The open notification a signal from `message` is about, if its sender showed it.
    private static func subject(_ message: OpaquePointer, _ context: UnsafeMutableRawPointer)
        -> (NotificationClient, NotificationHandle)? {
        guard let id = BusMessage.readUInt32(message), let sender = sd_bus_message_get_sender(message) else { return nil }
        let client = Unmanaged<NotificationClient>.fromOpaque(context).takeUnretainedValue()
        guard let handle = client.open[id], handle.server == String(cString: sender) else { return nil }
        return (client, handle)
    }

    private static let actionInvoked: sd_bus_message_handler_t = { message, context, _ in
        guard let message, let context, let (_, handle) = subject(message, context),
              let key = BusMessage.readString(message) else { return 0 }
        handle.onAction(handle, key)
        return 0
    }

    private static let closed: sd_bus_message_handler_t = { message, context, _ in
        guard let message, let context, let (client, handle) = subject(message, context) else { return 0 }
        client.forget(handle)
        handle.onClosed(handle)
        return 0
    }
}
