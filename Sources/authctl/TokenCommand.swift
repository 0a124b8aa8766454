import AgentIPC
import ArgumentParser
import AuthCLI
import FoundationEssentials

/// `authctl token`: ArgumentParser's view of the verb. The work is in ``TokenCommand/run(_:)``, which the fast path
/// (``FastPath``) calls too.
struct Token: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "token",
        abstract: "Print a fresh access token for an account, and nothing else.",
        discussion: """
        Examples:
          curl -H "Authorization: Bearer $(authctl token work)" \\
              https://api.example.com/
          authctl token work --header | curl -H @- https://x.example/
          authctl token work --min-valid 600   # valid 10 min or more
          authctl token work --scope read      # only some of its scopes
          # for one resource (RFC 8707):
          authctl token work --resource https://api.example.com/
          # A DPoP-bound token and its proof, for one request:
          url=https://api.example.com/x
          curl -H @<(authctl token work --header --url "$url") "$url"
        """)
    @OptionGroup var global: GlobalOptions
    @Argument(help: "The account name.") var account: String
    @Option(help: "The token must stay valid at least this many seconds.") var minValid: Int = 0
    @Flag(help: "Refresh even if the cached token is still fresh.") var refresh = false
    @Flag(help: "If the account needs to sign in, open the browser and wait instead of failing.") var interactive = false
    @Flag(help: "Print the OIDC ID token instead of the access token.") var idToken = false
    @Flag(help: "Print HTTP header lines: 'Authorization: Bearer TOKEN', or for a DPoP-bound token (with --url) 'Authorization: DPoP TOKEN' and 'DPoP: PROOF'.")
    var header = false
    @Flag(help: "Print JSON: token, type, expiry, scopes.") var json = false
    @Option(name: .customLong("scope"), help: "Ask for only this scope of the account's (repeatable); cached separately.")
    var scopes: [String] = []
    @Option(help: "The resource (RFC 8707 absolute URI) the token is for; cached separately.") var resource: String?
    @Option(help: "The HTTP method of the request a DPoP proof is for (default GET; with --url).") var method: String?
    @Option(help: "The URL of the request a DPoP proof is for: a DPoP-bound token then comes with its proof.") var url: String?
    @Option(help: "The resource server's DPoP-Nonce, to put in the proof (with --url); write --dpop-nonce=VALUE, as a nonce may start with -.") var dpopNonce: String?
    @Option(help: "Ask as this grant (authctl grant): its accounts, never a sign-in.") var grant: String?

    func validate() throws {
        guard minValid >= 0 else { throw ValidationError("--min-valid must be zero or more seconds") }
        if let conflict = arguments.conflict { throw ValidationError(conflict) }
    }

    /// The options as the fast path would have parsed them (``TokenArguments/parse(_:)``).
    var arguments: TokenArguments {
        TokenArguments(account: account, socket: global.socket, minValid: minValid, refresh: refresh,
                       interactive: interactive, idToken: idToken, header: header, json: json, scopes: scopes,
                       resource: resource, timeout: global.timeout, method: method, url: url, dpopNonce: dpopNonce,
                       grant: grant)
    }

    func run() throws { try TokenCommand.run(arguments) }
}

/// Asks the agent for the token and prints it: one implementation for both parsers.
enum TokenCommand {
    static func run(_ options: TokenArguments) throws(CLIFailure) {
        let client = try AgentConnection.connect(socket: options.socket, patience: options.interactive ? .person : .network,
                                                 timeout: options.timeout)
        let method = options.interactive
            ? SignInChoice.choose(device: false, noBrowser: false, environment: ProcessInfo.processInfo.environment).wireMethod
            : nil
        let request = options.wireRequest(method: method)
        let account = options.account
        var countdown: Countdown?
        let result: TokenResult
        do {
            defer { countdown?.stop() }  // before anything else is printed
            result = try CLIFailure.wrap { () throws(ClientError) in
                try client.call(request, as: TokenResult.self) { event in
                    if event.type == WireEvent.deviceCode {
                        if countdown == nil { countdown = Terminal.announceDevice(event, account: account) }
                        return
                    }
                    Terminal.announce(event, account: account)
                }
            }
        }
        // min_valid means "fresh enough, or the freshest the server gives" (docs/PROTOCOL.md): say when it is the latter.
        // A token that does not expire satisfies any --min-valid.
        if options.minValid > 0, !options.idToken, let expiresIn = result.expiresIn, expiresIn < options.minValid {
            writeStderr("authctl: note: this token is valid for \(expiresIn) s, less than --min-valid \(options.minValid): "
                        + "the server issues shorter-lived tokens, and this is the freshest it gives\n")
        }
        if options.json { return printJSON(result) }
        if options.idToken {
            guard let id = result.idToken else {
                throw CLIFailure(message: "account '\(account)' has no ID token (is 'openid' among its scopes?)", exit: ExitStatus.failure)
            }
            return print(id)
        }
        guard options.header else { return print(result.accessToken) }
        if result.tokenType.lowercased() == "dpop" {
            // A bound token is useless without its proof: print both, or say how to get both.
            guard let proof = result.dpopProof else {
                throw CLIFailure(message: "account '\(account)' has a DPoP-bound token, which needs a proof for each request",
                                 hint: "add --url URL (and --method, default GET) of the request it is for", exit: ExitStatus.usage)
            }
            return print("Authorization: DPoP \(result.accessToken)\nDPoP: \(proof)")
        }
        print("Authorization: \(result.tokenType) \(result.accessToken)")
    }
}
