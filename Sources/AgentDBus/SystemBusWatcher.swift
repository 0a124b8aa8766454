import AgentRuntime
import AgentAccess
import AuthCore
import CAgentBus
import FoundationEssentials
import Logging
import ServiceLifecycle
import Glibc

/// Listens on the **system** bus for logind's `PrepareForSleep` and NetworkManager's `StateChanged`, and tells the
/// broker (``TokenBroker/systemResumed()``, ``TokenBroker/networkUp()``), which decides what to refresh; and follows
/// the `LockedHint` of the user's display session (logind's `PropertiesChanged`), for what locks with the session
/// (``SessionLock``).
///
/// Optional like the session-bus service: without a system bus (containers, some minimal systems) it logs one
/// notice and ends; expiry (on a clock that counts suspend) and backoff work as before, only the early refreshes
/// after a resume or a reconnect are lost. `sd_bus_open_system` honours `DBUS_SYSTEM_BUS_ADDRESS`, which the tests
/// point at a private bus with a fake logind and NetworkManager. The connection is only a listener (no name, no
/// object), on its own thread, in the style of ``DBusService``.
public struct SystemBusWatcher: Service {
    static let login1 = (name: "org.freedesktop.login1", path: "/org/freedesktop/login1",
                         interface: "org.freedesktop.login1.Manager")
    static let networkManager = (name: "org.freedesktop.NetworkManager", path: "/org/freedesktop/NetworkManager",
                                 interface: "org.freedesktop.NetworkManager")

    let broker: TokenBroker
    let sessionLock: SessionLock?
    let logger: Logger

    public init(broker: TokenBroker, sessionLock: SessionLock? = nil, logger: Logger) {
        self.broker = broker
        self.sessionLock = sessionLock
        self.logger = logger
    }

    public func run() async {
        let loop = BusLoop()
        let (events, sink) = AsyncStream.makeStream(of: SystemEvent.self)
        let listener = SignalListener(sink: sink, sessionLock: sessionLock, logger: logger)
        // One consumer, so a suspend and the resume after it reach the broker in the order logind sent them.
        let broker = self.broker
        let consumer = Task {
            for await event in events {
                switch event {
                case .suspending: await broker.systemSuspending()
                case .resumed: await broker.systemResumed()
                case .networkUp: await broker.networkUp()
                }
            }
        }
        defer { consumer.cancel() }
        let logger = self.logger
        await withGracefulShutdownHandler {
            let end: String? = await withCheckedContinuation { continuation in
                DetachedThread.start(name: "auth-sysbus") { continuation.resume(returning: SystemBusWatcher.serve(listener, loop: loop, logger: logger)) }
            }
            if let end {
                logger.notice("\(end); no refresh on resume or network-up (expiry and backoff still apply)")
                // As DBusService: end only when asked to, never during another service's graceful shutdown.
                try? await gracefulShutdown()
            }
        } onGracefulShutdown: {
            loop.stop()
        }
        sink.finish()
    }

    /// The bus thread: connect, subscribe, serve until stopped. Returns why the watcher is off, or nil after a stop.
    static func serve(_ listener: SignalListener, loop: BusLoop, logger: Logger) -> String? {
        var bus: OpaquePointer?
        var r = sd_bus_open_system_with_description(&bus, "auth-agent-watch")
        guard r >= 0, let bus else { return "no system bus (\(DBusService.describe(r)))" }
        defer { _ = sd_bus_flush_close_unref(bus) }
        let context = Unmanaged.passRetained(listener)
        defer { context.release() }
        // Matched on the well-known sender, but any user may send a signal to the agent's connection and sd-bus takes
        // a unique-name sender for the match: each handler believes only the name's current owner.
        r = sd_bus_match_signal(bus, nil, login1.name, login1.path, login1.interface, "PrepareForSleep",
                                SignalListener.prepareForSleep, context.toOpaque())
        guard r >= 0 else { return "cannot watch logind on the system bus (\(DBusService.describe(r)))" }
        r = sd_bus_match_signal(bus, nil, networkManager.name, networkManager.path, networkManager.interface,
                                "StateChanged", SignalListener.stateChanged, context.toOpaque())
        guard r >= 0 else { return "cannot watch NetworkManager on the system bus (\(DBusService.describe(r)))" }
        if let lock = listener.sessionLock {
            r = aa_bus_match_login1_properties(bus, SignalListener.login1PropertiesChanged, context.toOpaque())
            guard r >= 0 else { return "cannot watch logind's sessions on the system bus (\(DBusService.describe(r)))" }
            lock.setHint(SignalListener.lockedHint(bus))
            logger.info("following the display session's lock", metadata: ["locked_hint": "\(lock.hint.map(String.init) ?? "unknown")"])
        }
        // Said once, so a user reading the log knows which hooks this machine has.
        let hasNetworkManager = aa_bus_name_has_owner(bus, networkManager.name) > 0
        logger.info("watching the system bus", metadata: [
            "logind": "\(aa_bus_name_has_owner(bus, login1.name) > 0)", "network_manager": "\(hasNetworkManager)"])
        if !hasNetworkManager {
            logger.info("NetworkManager is not running: a refresh that failed for lack of network waits out its backoff")
        }
        switch loop.run(bus) {
        case .stopped: return nil
        case .failed(let errno): return "the system bus connection failed (\(DBusService.describe(errno)))"
        }
    }

    /// Turns the signals into ``SystemEvent``s (bus thread) for the consumer task.
    final class SignalListener: @unchecked Sendable {
        let sink: AsyncStream<SystemEvent>.Continuation
        let sessionLock: SessionLock?
        let logger: Logger

        init(sink: AsyncStream<SystemEvent>.Continuation, sessionLock: SessionLock?, logger: Logger) {
            self.sink = sink
            self.sessionLock = sessionLock
            self.logger = logger
        }

        /// The display session's `LockedHint` now (a synchronous call), nil when it cannot be known.
        static func lockedHint(_ bus: OpaquePointer) -> Bool? {
            let r = aa_bus_display_session_locked(bus, getuid())
            return r < 0 ? nil : r == 1
        }

        /// Any of logind's properties changed (a session's `LockedHint`, the user's `Display`): the hint is read again.
        static let login1PropertiesChanged: sd_bus_message_handler_t = { message, context, _ in
            guard let message, let context, let bus = sd_bus_message_get_bus(message),
                  aa_bus_sent_by_owner_of(message, login1.name) == 1 else { return 0 }
            let listener = Unmanaged<SignalListener>.fromOpaque(context).takeUnretainedValue()
            guard let lock = listener.sessionLock else { return 0 }
            let before = lock.hint
            // A hint that cannot be read now keeps the last one read: an unknown hint counts as unlocked.
            guard let now = lockedHint(bus) else { return 0 }
            lock.setHint(now)
            if now != before {
                listener.logger.notice(now ? "the session is locked (logind)" : "the session is not locked (logind)",
                                       metadata: ["locked_hint": "\(now)"])
            }
            return 0
        }

        static let prepareForSleep: sd_bus_message_handler_t = { message, context, _ in
            guard let message, let context, aa_bus_sent_by_owner_of(message, login1.name) == 1 else { return 0 }
            let listener = Unmanaged<SignalListener>.fromOpaque(context).takeUnretainedValue()
            var start: Int32 = 0
            guard sd_bus_message_read_basic(message, BusMessage.type("b"), &start) > 0 else { return 0 }
            listener.sink.yield(SystemEvent.prepareForSleep(start != 0))
            return 0
        }

        static let stateChanged: sd_bus_message_handler_t = { message, context, _ in
            guard let message, let context, aa_bus_sent_by_owner_of(message, networkManager.name) == 1,
                  let state = BusMessage.readUInt32(message) else { return 0 }
            let listener = Unmanaged<SignalListener>.fromOpaque(context).takeUnretainedValue()
            listener.logger.debug("NetworkManager state changed", metadata: ["state": "\(state)"])
            if let event = SystemEvent.networkState(state) { listener.sink.yield(event) }
            return 0
        }
    }
}
