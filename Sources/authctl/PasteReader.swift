import AgentIPC
import FoundationEssentials
import Glibc

/// Manual paste (`authctl login --no-browser`): reads the final redirect URL from stdin on its own thread and hands
/// it to the agent with `login_callback` over a second connection, while the main thread waits for the `login`
/// result (which may also come from the loopback listener: whichever response arrives first wins). A rejected URL
/// is reported and another line is read; the pasted text is never echoed back.
final class PasteReader: @unchecked Sendable {
    /// Longer lines are refused without being kept in memory (the agent caps them too).
    static let maxLineBytes = 8 * 1024

    let socketPath: String
    let account: String

    init(socketPath: String, account: String) {
        self.socketPath = socketPath
        self.account = account
    }

    /// Starts the reader thread (detached: the process ends when the `login` request has its answer).
    func start() {
        var thread = pthread_t()
        let context = Unmanaged.passRetained(self).toOpaque()
        let created = pthread_create(&thread, nil, { raw in
            guard let raw else { return nil }
            Unmanaged<PasteReader>.fromOpaque(raw).takeRetainedValue().run()
            return nil
        }, context)
        if created == 0 {
            pthread_detach(thread)
        } else {
            Unmanaged<PasteReader>.fromOpaque(context).release()
            writeStderr("authctl: cannot read the pasted URL (thread creation failed); waiting for the browser redirect only\n")
        }
    }

    private func run() {
        while true {
            guard let line = PasteReader.readBoundedLine() else {
                writeStderr("authctl: end of input; still waiting for the redirect to reach the agent (Ctrl-C cancels)\n")
                return
            }
            let text = String(Substring(line.text).drop(while: { $0 == " " || $0 == "\t" }).reversed()
                .drop(while: { $0 == " " || $0 == "\t" }).reversed())
            if text.isEmpty { continue }
            if line.truncated {
                writeStderr("authctl: that line is longer than \(PasteReader.maxLineBytes) bytes; paste the URL from the address bar:\n")
                continue
            }
            do throws(ClientError) {
                let client = try AgentClient(path: socketPath)
                _ = try client.call(WireRequest(op: .loginCallback) { $0.account = account; $0.url = text }, as: LoginCallbackResult.self)
                writeStderr("Received the redirect; finishing the sign-in...\n")
                return
            } catch {
                if case .agent(let refused) = error {
                    writeStderr("authctl: \(refused.message)\nPaste the URL again (or wait for the browser):\n")
                    continue
                }
                writeStderr("authctl: cannot hand the URL to the agent: \(CLIFailure(error).message)\n")
                return
            }
        }
    }

    /// One line from stdin, at most `maxLineBytes` kept; nil at end of input with nothing read.
    static func readBoundedLine() -> (text: String, truncated: Bool)? {
        var bytes: [UInt8] = []
        var truncated = false
        var sawAny = false
        while true {
            let c = getchar()
            if c == EOF { break }
            sawAny = true
            if c == 0x0A { break }
            if bytes.count < maxLineBytes { bytes.append(UInt8(c)) } else { truncated = true }
        }
        guard sawAny else { return nil }
        if bytes.last == 0x0D { bytes.removeLast() }
        return (String(decoding: bytes, as: UTF8.self), truncated)
    }
}
