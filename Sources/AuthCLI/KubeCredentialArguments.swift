/// What `authctl kube-credential` was asked for: filled by ArgumentParser's command or by ``parse(_:)`` on the fast
/// path (kubectl runs the plugin for every command it runs), and run by the same code either way.
public struct KubeCredentialArguments: Equatable, Sendable {
    public var account: String
    /// `--access-token`: the OAuth access token instead of the OIDC ID token.
    public var accessToken: Bool
    public var minValid: Int
    public var socket: String?
    /// `--timeout`: seconds to wait for the agent's answer (0: no limit); nil: the verb's default.
    public var timeout: Int?

    public static let defaultMinValid = 60

    public init(account: String, accessToken: Bool = false, minValid: Int = defaultMinValid, socket: String? = nil,
                timeout: Int? = nil) {
        self.account = account
        self.accessToken = accessToken
        self.minValid = minValid
        self.socket = socket
        self.timeout = timeout
    }

    private static let scanner = ArgumentScanner(flags: ["access-token"], options: ["socket", "min-valid", "timeout"])

    /// The arguments after `kube-credential`, when they are a form ArgumentParser would accept and read the same
    /// way; nil for everything else, which then goes to ArgumentParser.
    public static func parse(_ arguments: [String]) -> KubeCredentialArguments? {
        guard let scan = scanner.scan(arguments), let account = scan.positional,
              let minValid = scan.count("min-valid"), let timeout = scan.count("timeout") else { return nil }
        return KubeCredentialArguments(account: account, accessToken: scan.flags.contains("access-token"),
                                       minValid: minValid ?? defaultMinValid, socket: scan.value("socket"),
                                       timeout: timeout)
    }
}
