import AgentAccess
import AuthCore
import Synchronization

/// The bus peers that asked for the agent's signals (`Subscribe`), each with its caller as identified when it asked,
/// until it leaves the bus. Signals about an account go to each of them by name, and only to those that may learn of
/// the account (``recipients(may:)``): a broadcast would reach every connection with a matching rule, and
/// xdg-dbus-proxy passes the agent's broadcasts on to every app allowed to talk to it, whatever accounts it was given.
final class SignalSubscribers: Sendable {
    /// Far above any desktop's listeners; a bound on what a program that opens connection after connection can make
    /// the agent keep (each entry also leaves with its connection).
    static let capacity = 1024
    /// Confined callers (apps through their proxy, which gives each of their connections a name of its own) share a
    /// quarter, as on the socket (``AcceptLoop``'s confined share): an app cannot keep the desktop's own listeners
    /// (a tray applet, a shell extension) from subscribing.
    static let confinedShare = capacity / 4

    private let table = Mutex<[String: Caller]>([:])

    /// Records `sender` (a unique name) as a subscriber; false when ``capacity`` subscribers are recorded already,
    /// or, for a confined caller, ``confinedShare`` confined ones. Subscribing again keeps one entry, with the caller
    /// as identified now.
    func subscribe(_ sender: String, caller: Caller) -> Bool {
        table.withLock { table in
            guard table[sender] == nil else {
                table[sender] = caller
                return true
            }
            guard table.count < SignalSubscribers.capacity else { return false }
            if caller.identity.isConfined,
               table.values.count(where: { $0.identity.isConfined }) >= SignalSubscribers.confinedShare { return false }
            table[sender] = caller
            return true
        }
    }

    /// `sender` left the bus.
    func remove(_ sender: String) {
        _ = table.withLock { $0.removeValue(forKey: sender) }
    }

    /// The unique names a signal goes to: the subscribers whose caller `may` learn of what it says, in a stable order.
    func recipients(may: (Caller) -> Bool) -> [String] {
        let all = table.withLock { $0 }
        return all.filter { may($0.value) }.keys.sorted()
    }

    var count: Int { table.withLock { $0.count } }
}
