import AgentService
import AgentRuntime
import AgentAccess
import AuthCore
import CAgentBus
import FoundationEssentials
import Synchronization
import Logging
import Glibc

/// The object at `/dev/authagent/Agent1`. Method calls arrive on the bus thread; each is checked (the caller's uid
/// must be the agent's), its message referenced, and its work run as a task, so a refresh or a sign-in never
/// blocks the bus. The reply is sent from the bus thread when the task finishes.
final class AgentBusObject: @unchecked Sendable {
    let operations: AgentOperations
    let loop: BusLoop
    let activity: ActivityTracker?
    let logger: Logger
    let uid = getuid()

    /// Calls whose reply has not been handed to the bus thread yet.
    private let pending = Atomic<Int>(0)
    private let lock = Mutex(())
    /// Calls that wait for a person, with their caller's unique name: cancelled when the caller leaves the bus (like
    /// a socket client hanging up) or the agent shuts down. Only these take the lock: a token call, the common
    /// case, does not (the bus thread and the finished task contended for it, and a contended `Mutex` is a
    /// priority-inheritance futex in the kernel: docs/BENCHMARKS.md, "What is left").
    private var personCalls: [UInt64: (task: Task<Void, Never>, sender: String?)] = [:]
    private var nextCall: UInt64 = 0
    /// Who gets the signals (`Subscribe`), each only about the accounts it may learn of.
    let subscribers = SignalSubscribers()

    init(operations: AgentOperations, loop: BusLoop, activity: ActivityTracker?, logger: Logger) {
        self.operations = operations
        self.loop = loop
        self.activity = activity
        self.logger = logger
    }

    /// The C handler registered with the vtable; `context` is an unretained `AgentBusObject`.
    static let handler: aa_bus_method_handler = { message, context, error in
        guard let message, let context, let error else { return -EINVAL }
        return Unmanaged<AgentBusObject>.fromOpaque(context).takeUnretainedValue().handle(message, error)
    }

    /// Bus thread.
    func handle(_ message: OpaquePointer, _ error: UnsafeMutablePointer<sd_bus_error>) -> Int32 {
        var uid: uid_t = 0
        var pid: pid_t = 0
        let r = aa_bus_sender_identity(message, &uid, &pid)
        guard r >= 0, uid == self.uid else {
            logger.warning("refused a D-Bus call from another user",
                           metadata: ["peer_pid": "\(pid)", "peer_uid": "\(r >= 0 ? String(uid) : "unknown")", "via": "dbus"])
            return aa_bus_error_set(error, DBusErrorName.accessDenied, "this agent serves uid \(self.uid) only")
        }
        guard let call = BusMessage.readCall(message) else {
            return aa_bus_error_set(error, "org.freedesktop.DBus.Error.UnknownMethod", "no such method on dev.authagent.Agent1")
        }
        // The bus daemon's credentials for the sender (GetConnectionCredentials), with the same /proc derivations as
        // a socket peer; pinned by start time (the bus gives no pidfd here).
        let caller = Caller.identify(peer: PeerCredentials(pid: pid, uid: uid, gid: 0), via: "dbus")
        let sender = sd_bus_message_get_sender(message).map { String(cString: $0) }
        if call == .subscribe { return subscribe(message, sender: sender, caller: caller, error) }
        _ = sd_bus_message_ref(message)
        let reference = BusMessageRef(raw: message)
        let operations = self.operations
        activity?.begin()
        pending.add(1, ordering: .relaxed)
        let run = { @Sendable (id: UInt64?) in
            let reply = await AgentBusAPI.perform(call, on: operations, caller: caller)
            self.loop.submit { _ in
                BusMessage.send(reply, for: reference.raw)
                _ = sd_bus_message_unref(reference.raw)
            }
            self.finished(id)
        }
        guard call.waitsForPerson(operations, caller: caller) else {
            Task { await run(nil) }
            return 1
        }
        // Registered before the task can finish: its `finished` waits for the lock.
        lock.withLock { _ in
            nextCall += 1
            let id = nextCall
            personCalls[id] = (Task { await run(id) }, sender)
        }
        return 1
    }

    private func finished(_ personCall: UInt64?) {
        if let personCall { lock.withLock { _ in personCalls[personCall] = nil } }
        pending.subtract(1, ordering: .relaxed)
        activity?.end()
    }

    /// Number of calls whose reply has not been handed to the bus thread yet.
    var inFlight: Int { pending.load(ordering: .relaxed) }

    /// Shutdown: cancels calls that wait for a person (a sign-in, a consent answer), then waits up to `timeout` for
    /// the others, so their replies are queued before the loop stops.
    func finish(timeout: Duration) async {
        let waiting = lock.withLock { _ in personCalls.values.map(\.task) }
        waiting.forEach { $0.cancel() }
        let deadline = ContinuousClock.now + timeout
        while inFlight > 0, ContinuousClock.now < deadline {
            try? await Task.sleep(for: .milliseconds(20))
        }
    }

    /// `Subscribe`, answered at once on the bus thread: the sender gets the signals from now until it leaves the bus.
    private func subscribe(_ message: OpaquePointer, sender: String?, caller: Caller,
                           _ error: UnsafeMutablePointer<sd_bus_error>) -> Int32 {
        guard let sender, sender.hasPrefix(":") else {
            return aa_bus_error_set(error, "org.freedesktop.DBus.Error.Failed", "a subscriber must have a unique name on the bus")
        }
        guard subscribers.subscribe(sender, caller: caller) else {
            logger.notice("refused a D-Bus signal subscription: too many subscribers",
                          metadata: ["peer_pid": "\(caller.pid)", "via": "dbus"])
            return aa_bus_error_set(error, "org.freedesktop.DBus.Error.LimitsExceeded", caller.identity.isConfined
                                    ? "sandboxed apps and other confined callers have \(SignalSubscribers.confinedShare) subscriptions already"
                                    : "the agent has \(SignalSubscribers.capacity) subscribers already")
        }
        logger.debug("a D-Bus caller subscribed to signals", metadata: ["peer_pid": "\(caller.pid)", "via": "dbus"])
        let r = BusMessage.send(.values([]), for: message)
        return r < 0 ? r : 1
    }

    /// The C handler for `NameOwnerChanged`: a unique name that lost its owner is a caller that left the bus.
    static let nameOwnerChanged: sd_bus_message_handler_t = { message, context, _ in
        // Only the bus daemon's: any peer (an app through its proxy too) can send this signal to the agent's
        // connection, and a forged one would cancel another caller's sign-in or drop its subscription.
        guard let message, let context, aa_bus_sent_by_owner_of(message, "org.freedesktop.DBus") == 1,
              let name = BusMessage.readString(message), let _ = BusMessage.readString(message),
              let newOwner = BusMessage.readString(message) else { return 0 }
        let object = Unmanaged<AgentBusObject>.fromOpaque(context).takeUnretainedValue()
        if name.hasPrefix(":"), newOwner.isEmpty { object.callerLeft(name) }
        return 0
    }

    /// Cancels the calls of `sender` that wait for a person (its sign-in is cancelled if nobody else waits; its
    /// consent question is withdrawn if no other request waits for it).
    func callerLeft(_ sender: String) {
        subscribers.remove(sender)
        let tasks = lock.withLock { _ in personCalls.values.filter { $0.sender == sender }.map(\.task) }
        guard !tasks.isEmpty else { return }
        logger.info("a D-Bus caller left; cancelling its wait for a person", metadata: ["via": "dbus"])
        tasks.forEach { $0.cancel() }
    }

    /// The signal for a broker event, if it has one.
    static func member(_ event: BrokerEvent) -> String? {
        switch event {
        case .accountChanged: return "AccountChanged"
        case .signInRequired: return "SignInRequired"
        default: return nil
        }
    }

    /// The subscribers the event's signal goes to: those that may learn of its account (a program of the desktop
    /// always; a confined caller only of an account that serves it now, as ``AgentOperations/accounts(caller:)``
    /// lists them). Judged when the signal is sent, so a reload's new policy counts at once.
    func recipients(of event: BrokerEvent) -> [String] {
        guard AgentBusObject.member(event) != nil else { return [] }
        let account = event.account, operations = self.operations
        return subscribers.recipients { operations.mayLearnOf(account, caller: $0) }
    }

    /// Sends the signal for a broker event, if it has one, to each of its ``recipients(of:)`` by name (from any
    /// thread). Never a broadcast: it would reach apps that were not given the account (docs/DBUS.md, "Signals").
    func emit(_ event: BrokerEvent) {
        guard let member = AgentBusObject.member(event) else { return }
        let recipients = recipients(of: event)
        guard !recipients.isEmpty else { return }
        let account = event.account
        let logger = self.logger
        loop.submit { bus in
            for destination in recipients {
                let r = aa_bus_emit_account_signal(bus, destination, member, account)
                if r < 0 { logger.debug("cannot send a D-Bus signal", metadata: ["signal": "\(member)", "errno": "\(-r)"]) }
            }
        }
    }
}
