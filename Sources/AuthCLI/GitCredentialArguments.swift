/// What `authctl git-credential` was asked for: filled by ArgumentParser's command or by ``parse(_:)`` on the fast
/// path (git runs the helper on every fetch and push), and run by the same code either way.
public struct GitCredentialArguments: Equatable, Sendable {
    /// git's action: `get`, `store`, `erase` (others are ignored, as gitcredentials(7) asks).
    public var action: String
    public var socket: String?
    public var account: String?
    public var username: String
    public var minValid: Int
    /// `--timeout`: seconds to wait for the agent's answer (0: no limit); nil: the verb's default.
    public var timeout: Int?

    public static let defaultUsername = "oauth2"
    public static let defaultMinValid = 60

    public init(action: String, socket: String? = nil, account: String? = nil, username: String = defaultUsername,
                minValid: Int = defaultMinValid, timeout: Int? = nil) {
        self.action = action
        self.socket = socket
        self.account = account
        self.username = username
        self.minValid = minValid
        self.timeout = timeout
    }

    private static let scanner = ArgumentScanner(flags: [], options: ["socket", "account", "username", "min-valid", "timeout"])

    /// The arguments after `git-credential`, when they are a form ArgumentParser would accept and read the same way;
    /// nil for everything else, which then goes to ArgumentParser.
    public static func parse(_ arguments: [String]) -> GitCredentialArguments? {
        guard let scan = scanner.scan(arguments), let action = scan.positional,
              let minValid = scan.count("min-valid"), let timeout = scan.count("timeout") else { return nil }
        var result = GitCredentialArguments(action: action, socket: scan.value("socket"), account: scan.value("account"),
                                            minValid: minValid ?? defaultMinValid, timeout: timeout)
        if let username = scan.value("username") {
            // The command's validate() refuses these; its wording is ArgumentParser's to print.
            guard GitCredentialReply.isSafeValue(username) else { return nil }
            result.username = username
        }
        return result
    }
}
