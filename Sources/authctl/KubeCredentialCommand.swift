import AgentIPC
import ArgumentParser
import AuthCLI
import FoundationEssentials

/// `authctl kube-credential`: a kubectl exec credential plugin (client.authentication.k8s.io/v1).
struct KubeCredentialCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "kube-credential",
        abstract: "A kubectl exec credential plugin: prints an ExecCredential (v1).",
        discussion: """
        Prints one line of JSON, a client.authentication.k8s.io/v1 ExecCredential \
        with status.token and status.expirationTimestamp.

        The token is the OIDC ID token by default: that is what a cluster set up \
        with --oidc-issuer-url verifies (its audience is the client ID). Its \
        expiry is the ID token's own 'exp'. --access-token sends the OAuth \
        access token instead, for clusters that accept the provider's access \
        tokens.

        In a kubeconfig (see docs/INTEGRATIONS.md):
          users:
          - name: work
            user:
              exec:
                apiVersion: client.authentication.k8s.io/v1
                command: authctl
                args: [kube-credential, work]
                interactiveMode: Never

        It never reads stdin and never opens a browser: sign in with \
        `authctl login ACCOUNT`. On failure nothing is printed on stdout and the \
        exit code is the usual one (4: sign-in required; see `authctl --help`).
        """)

    @OptionGroup var global: GlobalOptions
    @Argument(help: "The account name.") var account: String
    @Flag(help: "Use the OAuth access token instead of the OIDC ID token.") var accessToken = false
    @Option(help: "The token must stay valid at least this many seconds.") var minValid = KubeCredentialArguments.defaultMinValid

    func validate() throws {
        guard minValid >= 0 else { throw ValidationError("--min-valid must be zero or more seconds") }
    }

    /// The options as the fast path would have parsed them (``KubeCredentialArguments/parse(_:)``).
    var arguments: KubeCredentialArguments {
        KubeCredentialArguments(account: account, accessToken: accessToken, minValid: minValid, socket: global.socket,
                                timeout: global.timeout)
    }

    func run() throws { try Self.run(arguments) }

    /// The plugin's work, for both parsers (the fast path calls it too).
    static func run(_ options: KubeCredentialArguments) throws(CLIFailure) {
        let kind: KubeCredential.Kind = options.accessToken ? .accessToken : .idToken
        let client = try AgentConnection.connect(socket: options.socket, patience: .network, timeout: options.timeout)
        var outcome = try ask(client, options, kind: kind, forceRefresh: false)
        if case .idTokenStale = outcome {
            // The cached ID token is (nearly) expired while the access token is not: a refresh usually brings a new one.
            outcome = try ask(client, options, kind: kind, forceRefresh: true)
        }
        let account = options.account
        switch outcome {
        case .credential(let credential):
            print(credential.json())
        case .noIDToken:
            throw CLIFailure(message: "account '\(account)' has no ID token (is 'openid' among its scopes?)",
                             hint: "add 'openid' to its scopes and sign in again, or use --access-token if the cluster accepts access tokens",
                             exit: ExitStatus.failure)
        case .idTokenStale(let expiresAt):
            throw CLIFailure(message: "the ID token of '\(account)' expires at \(RFC3339.utc(unixSeconds: expiresAt)) and the server issued no newer one on refresh",
                             hint: "run `authctl login \(account)` to get a new ID token", exit: ExitStatus.loginRequired)
        }
    }

    private static func ask(_ client: AgentClient, _ options: KubeCredentialArguments, kind: KubeCredential.Kind,
                            forceRefresh: Bool) throws(CLIFailure) -> KubeCredential.Outcome {
        let request = WireRequest(op: .token) {
            $0.account = options.account; $0.minValid = options.minValid; $0.forceRefresh = forceRefresh; $0.idToken = kind == .idToken
        }
        // A first-use question (confirm = "first-use") is said on stderr, which kubectl shows: what to run to answer it.
        let result = try CLIFailure.wrap { () throws(ClientError) in
            try client.call(request, as: TokenResult.self) { Terminal.announce($0, account: options.account) }
        }
        return KubeCredential.decide(kind: kind, token: result, now: Int(Date().timeIntervalSince1970),
                                     minValid: options.minValid)
    }
}
