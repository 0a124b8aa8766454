import AuthCLI
import Glibc

/// `authctl token ACCOUNT [...]`, `authctl git-credential [...] ACTION` and `authctl kube-credential ACCOUNT [...]`
/// without ArgumentParser: building its command tree (Mirror reflection over every command, protocol conformance
/// scans) costs more than the request itself, and scripts, git and kubectl run these verbs on every call.
///
/// Only forms ArgumentParser would accept and read the same way take this path (``TokenArguments/parse(_:)``,
/// ``GitCredentialArguments/parse(_:)``, ``KubeCredentialArguments/parse(_:)``); anything else (help, usage errors,
/// unusual spellings) returns here without side effects and goes to ArgumentParser. Both paths run the same code
/// after parsing, so output and exit codes are identical. `AUTHCTL_FAST_PATH=off` sends everything to
/// ArgumentParser; `AUTHCTL_FAST_PATH=require` refuses (exit 2) any `token`, `git-credential` or `kube-credential`
/// command line the fast path would leave to it. Both are for tests, which compare the two paths and must know which
/// one ran.
enum FastPath {
    static let variable = "AUTHCTL_FAST_PATH"

    /// Runs the command and exits if it is a fast-path form; returns otherwise.
    static func runIfPossible(_ arguments: [String]) {
        guard arguments.count >= 2 else { return }
        let mode = getenv(variable).map { String(cString: $0) }
        guard mode != "off" else { return }
        let rest = Array(arguments.dropFirst(2))
        do throws(CLIFailure) {
            switch arguments[1] {
            case "token":
                guard let options = TokenArguments.parse(rest) else { return declined(mode) }
                try TokenCommand.run(options)
            case "git-credential":
                guard let options = GitCredentialArguments.parse(rest) else { return declined(mode) }
                try GitCredentialCommand.run(options)
            case "kube-credential":
                guard let options = KubeCredentialArguments.parse(rest) else { return declined(mode) }
                try KubeCredentialCommand.run(options)
            default:
                return
            }
        } catch {
            error.report()
        }
        CLIFailure.flushOutput()
        exit(ExitStatus.ok)
    }

    private static func declined(_ mode: String?) {
        guard mode == "require" else { return }
        CLIFailure(message: "\(variable)=require, but this command line is left to ArgumentParser", exit: ExitStatus.usage)
            .report()
    }
}
