import AuthCore
import ServiceLifecycle

/// Keeps systemd's `STATUS=` line true (``StatusLine``): follows the broker's events, recounts signed-in accounts
/// when one changes, and sends a line only when its text changes. On graceful shutdown it sends `STOPPING=1` at
/// once, so the service manager knows the agent is finishing its work (refreshes in flight, keyring writes).
/// Put it last in the service group: the group shuts services down in reverse order.
public struct StatusReporter: Service {
    let broker: TokenBroker
    let notify: @Sendable (String) -> Void
    let configProblem: @Sendable () -> String?

    /// `notify` gets sd_notify assignments (`STATUS=...`, `STOPPING=1`); `configProblem` is the configuration
    /// file's problem while it is broken (read again at each `configurationChanged` event).
    public init(broker: TokenBroker, configProblem: @escaping @Sendable () -> String? = { nil },
                notify: @escaping @Sendable (String) -> Void) {
        self.broker = broker
        self.configProblem = configProblem
        self.notify = notify
    }

    public func run() async throws {
        let events = broker.events()
        let broker = self.broker
        let notify = self.notify
        let configProblem = self.configProblem
        let reporter = Task {
            var line = StatusLine(accounts: await broker.accountNames.count, signedIn: await StatusReporter.signedIn(broker))
            line.configProblem = configProblem()
            line.inMemory = await broker.accountsInMemory
            var sent = ""
            func send() {
                guard line.text != sent else { return }
                sent = line.text
                notify("STATUS=\(sent)")
            }
            send()
            for await event in events {
                switch event {
                case .refreshStarted(let name): line.apply(.refreshStarted, account: name)
                case .refreshFinished(let name): line.apply(.refreshFinished, account: name)
                case .signInStarted(let name): line.apply(.signInStarted, account: name)
                case .signInFinished(let name): line.apply(.signInFinished, account: name)
                case .accountChanged:
                    line.signedIn = await StatusReporter.signedIn(broker)
                    line.inMemory = await broker.accountsInMemory
                case .signInRequired, .signInWanted, .signInExpiring: continue
                case .configurationChanged:
                    line.configProblem = configProblem()
                    line.accounts = await broker.accountNames.count
                    line.signedIn = await StatusReporter.signedIn(broker)
                }
                send()
            }
        }
        await withGracefulShutdownHandler {
            await withTaskCancellationHandler { await reporter.value } onCancel: { reporter.cancel() }
        } onGracefulShutdown: {
            reporter.cancel()
            notify("STOPPING=1\nSTATUS=Stopping")
        }
    }

    static func signedIn(_ broker: TokenBroker) async -> Int? {
        let status = await broker.status()
        // Known when the keyring answers, or when sign-ins live in memory only (no Secret Service, or not used).
        guard status.keyring == .available || status.keyring == .unused
                || (status.keyring == .absent && status.store == .auto) else { return nil }
        return status.accounts.filter { $0.hasRefreshToken == true }.count
    }
}
