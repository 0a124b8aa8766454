/// The one line `systemctl --user status auth-agent` shows (sd_notify `STATUS=`): what the agent is doing now.
/// Pure, so every wording is tested without systemd.
public struct StatusLine: Sendable, Equatable {
    public var accounts: Int
    /// Accounts with a refresh token in the keyring; nil while unknown (keyring locked or not asked yet).
    public var signedIn: Int?
    public var refreshing: Set<String> = []
    public var waitingForSignIn: Set<String> = []
    /// The configuration file's problem while it is broken (`file:line: ...`): every request fails until it is fixed.
    public var configProblem: String?

    public init(accounts: Int, signedIn: Int? = nil) {
        self.accounts = accounts
        self.signedIn = signedIn
    }

    /// Folds a broker event into the line (refreshes and sign-ins in flight).
    public mutating func apply(_ event: BrokerEventKind, account: String) {
        switch event {
        case .refreshStarted: refreshing.insert(account)
        case .refreshFinished: refreshing.remove(account)
        case .signInStarted: waitingForSignIn.insert(account)
        case .signInFinished: waitingForSignIn.remove(account)
        }
    }

    public enum BrokerEventKind: Sendable { case refreshStarted, refreshFinished, signInStarted, signInFinished }

    /// e.g. "Serving 3 accounts, 2 signed in", "Refreshing work", "Waiting for sign-in: work; refreshing home".
    public var text: String {
        if let configProblem { return "Configuration error: \(configProblem)" }
        var parts: [String] = []
        if !waitingForSignIn.isEmpty { parts.append("Waiting for sign-in: \(StatusLine.list(waitingForSignIn))") }
        if !refreshing.isEmpty { parts.append("\(parts.isEmpty ? "Refreshing" : "refreshing") \(StatusLine.list(refreshing))") }
        if !parts.isEmpty { return parts.joined(separator: "; ") }
        let serving = "Serving \(accounts) account\(accounts == 1 ? "" : "s")"
        guard let signedIn else { return serving }
        return "\(serving), \(signedIn) signed in"
    }

    static func list(_ names: Set<String>) -> String { names.sorted().joined(separator: ", ") }
}
