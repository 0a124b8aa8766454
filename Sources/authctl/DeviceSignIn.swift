import AgentIPC
import AuthCLI
import FoundationEssentials
import Glibc

extension SignInChoice {
    /// The `method` field of the `login` request (nil: the agent's default, the redirect).
    var wireMethod: LoginMethodName? {
        switch self {
        case .redirect, .paste: return nil
        case .device: return .device
        case .preferDevice: return .preferDevice
        }
    }
}

extension Terminal {
    /// A device sign-in (RFC 8628 §3.3): the page to open and the code to type, on stderr.
    /// Returns the countdown to the code's expiry it started on a terminal (nil when stderr is not one).
    static func announceDevice(_ event: WireEvent, account: String) -> Countdown? {
        guard let uri = event.verificationURI, let code = event.userCode else { return nil }
        var text = "To sign in to '\(account)', open this page in a browser on any device (a phone will do):\n\n"
        text += "  \(uri)\n\nand enter the code:\n\n  \(code)\n\n"
        if let complete = event.verificationURIComplete {
            text += "(or open \(complete), which has the code in it)\n"
        }
        let expires = event.expiresIn ?? event.timeoutSeconds ?? 0
        text += "The code expires in \(Formatter.duration(expires)). Waiting for you to approve (Ctrl-C cancels)...\n"
        writeStderr(text)
        return Countdown.start(seconds: expires, message: "Waiting for you to approve the code")
    }
}
