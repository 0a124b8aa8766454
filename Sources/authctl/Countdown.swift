import Glibc

/// While a sign-in waits, one line on a terminal's stderr counts down to its timeout ("4m 12s left"), redrawn each
/// second by a small thread. Not used when stderr is not a terminal (logs and pipes get the plain text only) or
/// when the user is typing a pasted URL.
final class Countdown: @unchecked Sendable {
    private let deadline: ContinuousClock.Instant
    private let message: String
    private var wake: [Int32] = [-1, -1]
    private var thread = pthread_t()
    private var running = false

    private init(seconds: Int, message: String) {
        deadline = .now + .seconds(seconds)
        self.message = message
    }

    /// Starts the countdown if stderr is a terminal; nil otherwise.
    static func start(seconds: Int, message: String = "Waiting for you to finish signing in in the browser") -> Countdown? {
        guard isatty(STDERR_FILENO) == 1, seconds > 0 else { return nil }
        let countdown = Countdown(seconds: seconds, message: message)
        guard pipe(&countdown.wake) == 0 else { return nil }
        let context = Unmanaged.passRetained(countdown).toOpaque()
        guard pthread_create(&countdown.thread, nil, { raw in
            guard let raw else { return nil }
            Unmanaged<Countdown>.fromOpaque(raw).takeRetainedValue().loop()
            return nil
        }, context) == 0 else {
            Unmanaged<Countdown>.fromOpaque(context).release()
            return nil
        }
        countdown.running = true
        return countdown
    }

    /// Stops the thread and clears the line.
    func stop() {
        guard running else { return }
        running = false
        _ = write(wake[1], "x", 1)
        pthread_join(thread, nil)
        close(wake[0])
        close(wake[1])
    }

    private func loop() {
        var lastWidth = 0
        while true {
            let left = max(0, Int((deadline - .now).components.seconds))
            let line = "\(message)... \(Formatter.duration(left)) left (Ctrl-C cancels)"
            writeStderrRaw("\r" + line + String(repeating: " ", count: max(0, lastWidth - line.count)))
            lastWidth = line.count
            var poller = pollfd(fd: wake[0], events: Int16(POLLIN), revents: 0)
            if poll(&poller, 1, 1000) > 0 { break }
        }
        writeStderrRaw("\r" + String(repeating: " ", count: lastWidth) + "\r")
    }
}
