import AgentIPC
import AuthCLI
import FoundationEssentials
import Glibc

/// authctl's documented exit codes (README, `authctl --help`).
enum ExitStatus {
    static let ok: Int32 = 0
    static let failure: Int32 = 1
    static let usage: Int32 = 2
    static let agentNotRunning: Int32 = 3
    static let loginRequired: Int32 = 4
    static let keyring: Int32 = 5
    static let server: Int32 = 6
    static let loginIncomplete: Int32 = 7
    static let account: Int32 = 8
    static let protocolError: Int32 = 9
    static let configError: Int32 = 10
    static let timeout: Int32 = 11

    static func forCode(_ code: ErrorCode?) -> Int32 {
        switch code {
        case .loginRequired?: return loginRequired
        case .unknownGrant?: return agentNotRunning  // `token --grant`: nothing serves that grant
        case .keyringLocked?, .keyringUnavailable?, .keyringError?, .tpmUnavailable?: return keyring
        case .serverUnreachable?, .serverError?, .tlsError?, .invalidClient?, .invalidTokenResponse?, .invalidMetadata?,
             .invalidIDToken?, .issuerMismatch?, .pkceUnsupported?, .insecureEndpoint?, .dpopRefused?: return server
        case .loginTimeout?, .loginCancelled?, .accessDenied?, .loginFailed?, .deviceGrantUnsupported?, .loginRateLimited?:
            return loginIncomplete
        case .unknownAccount?, .invalidConfig?, .invalidScope?, .invalidTarget?: return account
        case .configError?: return configError
        case .badRequest?, .unsupportedVersion?, .unknownOp?, .messageTooLarge?, .permissionDenied?: return protocolError
        case .minValidUnsatisfiable?, .agentBusy?, .internalError?, nil: return failure
        }
    }
}

/// A failure to report: one sentence on stderr, a hint, and an exit code.
struct CLIFailure: Error {
    var message: String
    var hint: String?
    var exit: Int32

    init(message: String, hint: String? = nil, exit: Int32) {
        self.message = message
        self.hint = hint
        self.exit = exit
    }

    init(_ error: ClientError) {
        switch error {
        case .noSocketPath:
            self.init(message: "cannot find the agent's socket: neither AUTH_AGENT_SOCKET nor XDG_RUNTIME_DIR is set",
                      hint: "run authctl from your desktop session, or set AUTH_AGENT_SOCKET", exit: ExitStatus.agentNotRunning)
        case .agentNotRunning(let path, _):
            if let sandboxed = FlatpakSandbox.unreachable(socket: path) { self = sandboxed; return }
            self.init(message: "auth-agent is not running (nothing listens on \(path))",
                      hint: "start it with `systemctl --user start auth-agent.socket`, or run `auth-agent &`",
                      exit: ExitStatus.agentNotRunning)
        case .io(let text):
            self.init(message: text, exit: ExitStatus.failure)
        case .timeout(let text):
            self.init(message: text,
                      hint: "see `systemctl --user status auth-agent` and `journalctl --user -u auth-agent`; --timeout SECONDS waits longer",
                      exit: ExitStatus.timeout)
        case .forwardEnded:
            self.init(message: "the forward to this host has ended on the desktop: it was stopped there (`authctl forward --stop`), or the agent there stopped",
                      hint: "on the desktop, open a new session with `authctl forward HOST`", exit: ExitStatus.agentNotRunning)
        case .protocolViolation(let text):
            self.init(message: text, hint: "authctl and auth-agent may be different versions", exit: ExitStatus.protocolError)
        case .agent(let wire):
            self.init(message: wire.message, hint: wire.keyringAdvice ?? CLIFailure.hint(for: wire.knownCode),
                      exit: ExitStatus.forCode(wire.knownCode))
        }
    }

    /// The keyring codes' hints are the agent's (`keyring_advice`: the words of the Secret Service that answers).
    static func hint(for code: ErrorCode?) -> String? {
        switch code {
        case .unknownAccount?: return "see `authctl accounts` for the configured names"
        case .unknownGrant?: return "on the desktop, see `authctl grant --list`"
        case .invalidScope?: return "ask only for scopes the account is configured with (see `authctl accounts`)"
        case .invalidTarget?: return "give --resource as an absolute URI without fragment, e.g. https://api.example.com/"
        case .serverUnreachable?, .serverError?: return "check your network; the agent keeps your sign-in and will retry"
        case .tlsError?: return "the server's certificate did not verify against the system's trusted CAs; check the endpoint's address, your network (a proxy or captive portal), and the system clock"
        case .dpopRefused?:
            return "check the system clock; set `dpop = false` for the account if the server cannot take DPoP from this client, then sign in again"
        case .tpmUnavailable?:
            return "see `authctl doctor` (its tpm line), the account's dpop_key and [agent] tpm_tcti; a sign-in already made is kept, and works again once the TPM answers"
        case .loginTimeout?: return "run the login again and finish it in the browser within the time limit"
        case .deviceGrantUnsupported?:
            return "sign in without --device, or set device_authorization_endpoint for the account if the server has one"
        case .loginRateLimited?: return "wait until the time given, check the account's configuration, then sign in again"
        case .configError?: return "fix the file (the agent reads it again on the next request), or see `auth-agent --check-config`"
        case .accessDenied?: return "if the agent refused this program, the account's allowed_clients and confirm settings decide (see `authctl status` and `authctl audit`)"
        case .agentBusy?:
            return "a program may be holding many requests open at once; try again, and see `journalctl --user -u auth-agent` (\"too many connections\")"
        default: return nil
        }
    }

    func report() -> Never {
        var text = "authctl: \(message)\n"
        if let hint { text += "hint: \(hint)\n" }
        writeStderr(text)
        Glibc.exit(self.exit)
    }

    /// stdout is buffered, so a write that failed (a full disk, `>/dev/full`) shows only when it is flushed: a token or
    /// credential that did not reach its reader is a failure (exit 1), not a success. (Every stream is flushed:
    /// Swift 6 does not let `stdout` itself be named.)
    static func flushOutput() {
        guard fflush(nil) != 0 else { return }
        CLIFailure(message: "cannot write the output: \(String(cString: strerror(errno)))", exit: ExitStatus.failure).report()
    }

    /// Runs a client call, turning its typed error into a reportable failure.
    static func wrap<T>(_ body: () throws(ClientError) -> T) throws(CLIFailure) -> T {
        do { return try body() } catch { throw CLIFailure(error) }
    }
}

/// Writes to stderr without Foundation's FileHandle (authctl uses FoundationEssentials only, to start fast). What
/// it writes carries messages, URLs and program paths from elsewhere: control characters are made visible
/// (``TerminalText``), so none of them reaches the terminal as an escape sequence.
func writeStderr(_ text: String) {
    writeStderrRaw(TerminalText.safe(text))
}

/// ``writeStderr(_:)`` for authctl's own control characters only (the countdown's carriage return).
func writeStderrRaw(_ text: String) {
    var bytes = Array(text.utf8)
    var offset = 0
    while offset < bytes.count {
        let n = bytes[offset...].withUnsafeMutableBytes { Glibc.write(STDERR_FILENO, $0.baseAddress, $0.count) }
        if n <= 0 { break }
        offset += n
    }
}
