import AgentIPC
import AuthCLI
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif

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
    static func announceDevice(_ event: WireEvent, account: String, countdown: Countdown) {
        guard let uri = event.verificationURI, let code = event.userCode else { return }
        var text = "To sign in to '\(account)', open this page in a browser on any device (a phone will do):\n\n"
        text += "  \(uri)\n\nand enter the code:\n\n  \(code)\n\n"
        if let complete = event.verificationURIComplete {
            text += "(or open \(complete), which has the code in it)\n"
        }
        let expires = event.expiresIn ?? event.timeoutSeconds ?? 0
        text += "The code expires in \(Formatter.duration(expires)). Waiting for you to approve (Ctrl-C cancels)...\n"
        writeStderr(text)
        if isatty(STDERR_FILENO) == 1, expires > 0 { countdown.start(seconds: expires) }
    }
}

/// A one-line countdown on a terminal ("code expires in 9m 41s"), rewritten every second on its own thread until
/// ``stop()``. Writes and the final erase share one lock, so nothing is printed after `stop` returns.
final class Countdown: @unchecked Sendable {
    private let lock = Mutex()
    private var running = false
    private var stopped = false
    private var deadline = 0.0

    func start(seconds: Int) {
        lock.lock()
        defer { lock.unlock() }
        guard !running, !stopped else { return }
        running = true
        deadline = Countdown.monotonic() + Double(seconds)
        var thread = pthread_t()
        let context = Unmanaged.passRetained(self).toOpaque()
        if pthread_create(&thread, nil, { raw in
            guard let raw else { return nil }
            Unmanaged<Countdown>.fromOpaque(raw).takeRetainedValue().run()
            return nil
        }, context) == 0 {
            pthread_detach(thread)
        } else {
            Unmanaged<Countdown>.fromOpaque(context).release()
            running = false
        }
    }

    func stop() {
        lock.lock()
        defer { lock.unlock() }
        if running, !stopped { writeStderr("\r\u{1B}[K") }
        stopped = true
    }

    private func run() {
        while true {
            lock.lock()
            if stopped { lock.unlock(); return }
            let left = max(0, Int((deadline - Countdown.monotonic()).rounded(.up)))
            writeStderr("\r\u{1B}[K  code expires in \(Formatter.duration(left))")
            lock.unlock()
            if left == 0 { return }
            usleep(1_000_000)
        }
    }

    private static func monotonic() -> Double {
        var ts = timespec()
        clock_gettime(CLOCK_BOOTTIME, &ts)
        return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
    }
}

/// A pthread mutex (FoundationEssentials, which authctl uses to start fast, has no NSLock).
final class Mutex: @unchecked Sendable {
    private let raw = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    init() { pthread_mutex_init(raw, nil) }
    deinit {
        pthread_mutex_destroy(raw)
        raw.deallocate()
    }
    func lock() { pthread_mutex_lock(raw) }
    func unlock() { pthread_mutex_unlock(raw) }
}
