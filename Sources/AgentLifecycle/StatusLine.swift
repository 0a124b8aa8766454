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
    /// Accounts whose sign-in lives in memory only (no Secret Service): the agent does not exit idle meanwhile.
    public var inMemory: [String] = []

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

    /// e.g. "Serving 3 accounts, 2 signed in", "Refreshing work", "Waiting for sign-in: work; refreshing home",
    /// "Serving 1 account, 1 signed in; kept in memory only, so no idle exit: work".
    public var text: String {
        if let configProblem { return "Configuration error: \(configProblem)" }
        var parts: [String] = []
        if !waitingForSignIn.isEmpty { parts.append("Waiting for sign-in: \(StatusLine.list(waitingForSignIn))") }
        if !refreshing.isEmpty { parts.append("\(parts.isEmpty ? "Refreshing" : "refreshing") \(StatusLine.list(refreshing))") }
        if parts.isEmpty {
            let serving = "Serving \(accounts) account\(accounts == 1 ? "" : "s")"
            parts.append(signedIn.map { "\(serving), \($0) signed in" } ?? serving)
        }
        if !inMemory.isEmpty {
            parts.append("kept in memory only, so no idle exit: \(StatusLine.list(Set(inMemory)))")
        }
        return parts.joined(separator: "; ")
    }

    static func list(_ names: Set<String>) -> String { names.sorted().joined(separator: ", ") }
}
