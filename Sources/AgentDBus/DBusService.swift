import AgentService
import AgentRuntime
import AgentAccess
import AuthCore
import CAgentBus
import FoundationEssentials
import Logging
import ServiceLifecycle
import Glibc

/// The agent on the session bus: owns `dev.authagent.Agent`, serves `dev.authagent.Agent1` at
/// `/dev/authagent/Agent1` and turns broker events into the `AccountChanged` and `SignInRequired` signals.
///
/// Optional by design: with no session bus, or with the name taken, it logs one warning and returns, and the agent
/// goes on serving its socket (run it with `successTerminationBehavior: .ignore`). On graceful shutdown it cancels
/// pending sign-ins, waits up to ``drainTimeout`` for other calls, sends their replies and closes the connection.
public struct DBusService: Service {
    public static let busName = AA_BUS_NAME
    public static let objectPath = AA_BUS_PATH
    public static let interface = AA_BUS_INTERFACE
    public static let drainTimeout: Duration = .seconds(10)

    let operations: AgentOperations
    let activity: ActivityTracker?
    let notifications: Bool
    let logger: Logger

    /// `activity` hears of every call in flight (for the idle exit). `notifications`: show a desktop notification
    /// when an account must sign in (`[agent] notifications`).
    public init(operations: AgentOperations, activity: ActivityTracker? = nil, notifications: Bool = true,
                logger: Logger) {
        self.operations = operations
        self.activity = activity
        self.notifications = notifications
        self.logger = logger
    }

    public func run() async {
        let loop = BusLoop()
        let object = AgentBusObject(operations: operations, loop: loop, activity: activity, logger: logger)
        let client = notifications ? NotificationClient(logger: logger) : nil
        let notifier = client.map { SignInNotifier(operations: operations, client: $0, loop: loop, logger: self.logger) }
        // First-use consent questions become notifications too (authctl approve works without them).
        let consent = client.map { ConsentNotifier(access: operations.access, client: $0, loop: loop, logger: self.logger) }
        operations.access.setPrompter(consent)
        defer { operations.access.setPrompter(nil) }
        let events = Task {
            for await event in operations.events() {
                object.emit(event)
                notifier?.handle(event)
            }
        }
        defer { events.cancel() }
        let logger = self.logger
        await withGracefulShutdownHandler {
            let end: String? = await withCheckedContinuation { continuation in
                DetachedThread.start(name: "auth-agent-dbus") {
                    continuation.resume(returning: DBusService.serve(object, notifications: client, loop: loop, logger: logger))
                }
            }
            if let end {
                logger.warning("\(end); the D-Bus API is off, the socket still serves")
                // Wait to be stopped: a service that returns while the group shuts down (the bus goes away at
                // logout, as the manager stops the agent) makes ServiceGroup cancel every other service at once,
                // cutting a keyring write or a refresh in flight.
                try? await gracefulShutdown()
            }
        } onGracefulShutdown: {
            Task {
                await object.finish(timeout: DBusService.drainTimeout)
                loop.stop()
            }
        }
    }

    /// The bus thread: connect, register the object, take the name, serve until stopped. Returns why the D-Bus API
    /// is not (or no longer) available, or nil after a requested stop.
    static func serve(_ object: AgentBusObject, notifications: NotificationClient?, loop: BusLoop,
                      logger: Logger) -> String? {
        defer { loop.end() }  // however serving ends, or if it never starts: nothing is queued for a loop that is gone
        var bus: OpaquePointer?
        var r = sd_bus_open_user_with_description(&bus, "auth-agent")
        guard r >= 0, let bus else { return "no session bus (\(describe(r)))" }
        defer { _ = sd_bus_flush_close_unref(bus) }
        var slot: OpaquePointer?
        let context = Unmanaged.passRetained(object)
        defer { context.release() }
        r = aa_bus_add_agent_object(bus, &slot, AgentBusObject.handler, context.toOpaque())
        guard r >= 0 else { return "cannot register \(objectPath) (\(describe(r)))" }
        defer { _ = sd_bus_slot_unref(slot) }
        // Callers that leave the bus: their calls that wait for a person (Login, a GetAccessToken waiting for consent)
        // are cancelled (floating slot, freed with the bus).
        r = sd_bus_match_signal(bus, nil, "org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus",
                                "NameOwnerChanged", AgentBusObject.nameOwnerChanged, context.toOpaque())
        if r < 0 { logger.notice("cannot watch for callers leaving the bus", metadata: ["errno": "\(-r)"]) }
        let notificationsContext = notifications.map { Unmanaged.passRetained($0) }
        defer { notificationsContext?.release() }
        if let notificationsContext {
            r = NotificationClient.watch(bus: bus, context: notificationsContext.toOpaque())
            if r < 0 { logger.notice("cannot watch desktop notification actions", metadata: ["errno": "\(-r)"]) }
        }
        // The object is in place before the name is taken, so an activating call finds it.
        r = sd_bus_request_name(bus, busName, 0)
        if r == -EEXIST { return "\(busName) is already owned on the session bus (another agent?)" }
        guard r >= 0 else { return "cannot take \(busName) on the session bus (\(describe(r)))" }
        logger.info("serving D-Bus", metadata: ["bus_name": "\(busName)", "object_path": "\(objectPath)"])
        switch loop.run(bus) {
        case .stopped:
            _ = sd_bus_release_name(bus, busName)
            return nil
        case .failed(let errno):
            return "the session bus connection failed (\(describe(errno)))"
        }
    }

    static func describe(_ negativeErrno: Int32) -> String {
        String(cString: strerror(-negativeErrno))
    }
}
