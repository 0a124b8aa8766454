import AgentService
import AgentAccess
import AgentIPC
import AuthCore
import CAgentBus
import FoundationEssentials
import Logging
import TimeText

/// When to show the "sign in" desktop notification: once per account when the broker says it must sign in, and
/// again only after a sign-in of that account finished (so a failing background caller does not spam the desktop).
/// Pure logic, no bus.
/// A confined caller that needed a sign-in (``BrokerEvent/signInWanted(_:by:caller:)``) is named, once per account
/// and caller (as the agent names it, not as it describes itself), in a notification that replaces the account's
/// plain one; at most ``maxNamed`` callers until the account signs in.
public struct SignInNotificationPolicy: Sendable, Equatable {
    /// Callers named at most between two sign-ins (all accounts together): each needed a door of its own (a
    /// forward, an app, a grant), so more is a flood, not news.
    public static let maxNamed = 64
    private var shown: Set<String> = []
    /// (account, caller) pairs already named, keyed `account NUL caller`.
    private var named: Set<String> = []

    public init() {}

    /// The account to notify about for `event`, and who asked when a confined caller did; nil: nothing to show.
    public mutating func notice(for event: BrokerEvent) -> (account: String, by: String?)? {
        switch event {
        case .signInRequired(let account):
            return shown.insert(account).inserted ? (account, nil) : nil
        case .signInWanted(let account, let by, let caller):
            shown.insert(account)
            guard named.count < SignInNotificationPolicy.maxNamed else { return nil }
            return named.insert(account + "\u{0}" + caller).inserted ? (account, by) : nil
        case .signInFinished(let account):
            shown.remove(account)
            named = named.filter { !$0.hasPrefix(account + "\u{0}") }
            return nil
        default:
            return nil
        }
    }

    /// The account to notify about for `event`, or nil.
    public mutating func account(toNotifyFor event: BrokerEvent) -> String? { notice(for: event)?.account }

    /// The notification's text: account names, who asked, and the command only, never a token or a URL.
    public static func text(account: String, by: String? = nil) -> (summary: String, body: String) {
        guard let by else {
            return ("Sign in to \(account)",
                    "The account '\(account)' needs you to sign in again. Run: authctl login \(account)")
        }
        // `by` is a caller described by the agent (names it chose, shown safely); the body may hold markup.
        return ("Sign in to \(account)",
                "\(ConsentNotifier.escaped(by)) asks for tokens of the account '\(account)', which needs you to sign in here (not there). "
                    + "Run: authctl login \(account)")
    }

    /// The warning ahead of a sign-in's end (``BrokerEvent/signInExpiring(_:validUntil:at:)``): when, and the
    /// command. `now` is the warning's own instant, so the count is the one its journal line gives.
    public static func expiringText(account: String, validUntil: Date, now: Date) -> (summary: String, body: String) {
        let when = DaysLeft.phrase(daysLeft(validUntil, now: now)) ?? "today"
        return ("Sign-in to \(account) ends \(when)",
                "The sign-in of the account '\(account)' is valid until "
                    + "\(LocalTime.text(Int(validUntil.timeIntervalSince1970))). "
                    + "Sign in again when it suits you: authctl login \(account)")
    }

    /// Whole days left, by the one rule every day count follows (``DaysLeft``); 0 on the last day.
    static func daysLeft(_ validUntil: Date, now: Date) -> Int {
        DaysLeft.count(until: validUntil.timeIntervalSince1970, now: now.timeIntervalSince1970)
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
    /// The last sign-in-ends warning per account: the next one replaces it rather than piling up.
    private var warnings: [String: NotificationHandle] = [:]
    /// The last "sign in" notification per account: one naming who asked replaces it.
    private var required: [String: NotificationHandle] = [:]

    init(operations: AgentOperations, client: NotificationClient, loop: BusLoop, logger: Logger) {
        self.operations = operations
        self.client = client
        self.loop = loop
        self.logger = logger
    }

    /// From any thread.
    func handle(_ event: BrokerEvent) {
        if case .signInExpiring(let account, let validUntil, let at) = event {
            return warn(account, validUntil: validUntil, at: at)
        }
        loop.submit { [self] bus in
            guard let (account, by) = policy.notice(for: event) else { return }
            let (summary, body) = SignInNotificationPolicy.text(account: account, by: by)
            let notification = DesktopNotification(summary: summary, body: body,
                                                   actions: [.init(key: SignInNotifier.actionKey, label: "Sign in")],
                                                   replaces: required[account])
            required[account] = client.send(notification, bus: bus, what: "sign-in", metadata: ["account": "\(account)"],
                                            onAction: signInOnClick(account))
        }
    }

    /// The sign-in ends soon: a notification with the "Sign in" action, replacing the account's previous warning;
    /// critical on the last day. Counted from `at`, the broker's instant of the warning.
    private func warn(_ account: String, validUntil: Date, at: Date) {
        loop.submit { [self] bus in
            let (summary, body) = SignInNotificationPolicy.expiringText(account: account, validUntil: validUntil, now: at)
            let lastDay = SignInNotificationPolicy.daysLeft(validUntil, now: at) == 0
            let notification = DesktopNotification(
                summary: summary, body: body, actions: [.init(key: SignInNotifier.actionKey, label: "Sign in")],
                urgency: lastDay ? .critical : .normal, replaces: warnings[account])
            warnings[account] = client.send(notification, bus: bus, what: "sign-in ending",
                                            metadata: ["account": "\(account)"], onAction: signInOnClick(account))
        }
    }

    /// The "Sign in" button: one sign-in per notification (it is forgotten at the first click).
    private func signInOnClick(_ account: String) -> (NotificationHandle, String) -> Void {
        { [self] handle, key in
            guard key == SignInNotifier.actionKey else { return }
            client.forget(handle)
            startSignIn(account)
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
