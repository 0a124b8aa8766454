import Glibc

/// One client connection's life on the agent's socket, as a pure state machine: no I/O, no clock, no threads. The
/// ``AcceptLoop`` owns each connection from accept to close; it feeds this machine what the socket reports (bytes
/// read, the end of input, bytes written, a hang-up) and what the async side reports (a request answered), and asks
/// it what to do next: which complete line to serve, whether to watch the socket for reading or writing, and when
/// to close.
///
/// What it enforces:
/// - a request line is at most ``maxLine`` bytes; a longer one is answered `message_too_large` (by the owner, told
///   by ``Next/tooLong``) and the connection reads nothing more (SECURITY.md 22);
/// - at most ``maxInFlight`` requests run on the async side at once; at the cap no further line is served and the
///   socket is not read, so the client's writes wait in the kernel;
/// - replies the client does not read are kept only up to ``outputLimit`` before reading stops (back-pressure): what
///   the agent holds for a client that never reads is bounded by that plus the replies of the requests in flight;
/// - once the client will send nothing more (end of input, an over-long line, the agent shutting down), the lines
///   already received are still served, every request in flight still answers, the replies are written, and only
///   then does the connection close (``isFinished``); a hang-up closes at once;
/// - a refused connection (another process wrote to it) gets its refusal line after the output already pending, never
///   inside a reply the socket took only part of; then nothing more is read, served or answered, and it closes once
///   the refusal is written.
struct ConnectionStateMachine {
    enum State: Equatable {
        /// Reading and serving request lines.
        case open
        /// The client will send nothing more: what arrived is served and answered, then the connection closes.
        case draining
        /// Refused (``refuse(_:)``): the output pending and the refusal line after it are written, then the connection
        /// closes. Nothing more is read or served, and replies still to come are dropped.
        case refusing
        /// Closed: the client hung up or the socket failed. Nothing more is served or written.
        case closed
    }

    /// What the owner serves next (``nextLine()``).
    enum Next: Equatable {
        /// A complete request line, without its newline (and without a `\r` before it): a view of the machine's
        /// input buffer, valid until the next event.
        case line(ArraySlice<UInt8>)
        /// A line passed ``maxLine``: the owner answers `message_too_large`; the machine reads nothing more.
        case tooLong
        /// Nothing to serve now: no complete line, at the in-flight cap, or too much output unread by the client.
        case none
    }

    let maxLine: Int
    let maxInFlight: Int
    let outputLimit: Int

    private(set) var state: State = .open
    /// Requests handed to the async side and not yet answered.
    private(set) var inFlight = 0
    /// Bytes received and not yet served as lines, from `inputStart`.
    private var input: [UInt8] = []
    private var inputStart = 0
    /// How far past `inputStart` a newline was already looked for (a slow client's long line is scanned once).
    private var scanned = 0
    /// Reply bytes the socket has not taken yet, from `outputStart`.
    private var output: [UInt8] = []
    private var outputStart = 0

    init(maxLine: Int, maxInFlight: Int, outputLimit: Int) {
        self.maxLine = maxLine
        self.maxInFlight = maxInFlight
        self.outputLimit = outputLimit
    }

    // MARK: Events

    /// Bytes arrived from the client. Ignored unless open (nothing is read after the input ended).
    mutating func received(_ bytes: UnsafeRawBufferPointer) {
        guard state == .open, bytes.count > 0 else { return }
        compactInput()
        input.append(contentsOf: bytes)
    }

    /// The client half-closed, or the agent is shutting down: a last line without a newline is still a request
    /// (`printf '{...}' | socat`), then the connection drains.
    mutating func inputEnded() {
        guard state == .open else { return }
        state = .draining
        if inputStart < input.count, input.last != 0x0A { input.append(0x0A) }
    }

    /// A request went to the async side.
    mutating func started() { inFlight += 1 }

    /// A request on the async side answered (its reply is ``queue(_:)``d separately).
    mutating func finished() {
        precondition(inFlight > 0, "a request finished that never started")
        inFlight -= 1
    }

    /// Keeps reply bytes the socket did not take. Dropped once refused or closed.
    mutating func queue(_ bytes: UnsafeRawBufferPointer) {
        guard isServing, bytes.count > 0 else { return }
        output.append(contentsOf: bytes)
    }

    /// The connection is refused with `line` (its newline included), its last output: queued after what is pending,
    /// so a reply the socket took only part of is completed first and the client reads whole lines, then the
    /// refusal. Nothing more is read or served (what was received and not served is dropped), replies of the
    /// requests still in flight are dropped when they come, and the connection is finished once the refusal is
    /// written. Ignored once refused or closed.
    mutating func refuse(_ line: UnsafeRawBufferPointer) {
        guard isServing else { return }
        state = .refusing
        input = []
        inputStart = 0
        scanned = 0
        output.append(contentsOf: line)
    }

    /// The socket took `count` bytes of the pending output (``pendingOutput``). The written bytes are dropped once
    /// they are all written, or once they are most of the buffer: a client that always leaves some output unread
    /// must not make the buffer grow with everything it ever read.
    mutating func wrote(_ count: Int) {
        precondition(count >= 0 && outputStart + count <= output.count, "wrote more than was pending")
        outputStart += count
        if outputStart == output.count {
            output.removeAll(keepingCapacity: output.capacity <= 4096)
            outputStart = 0
        } else if outputStart >= 4096, outputStart * 2 >= output.count {
            output.removeFirst(outputStart)
            outputStart = 0
        }
    }

    /// The buffer's size, written bytes not yet dropped included (tests check it stays bounded).
    var outputBufferCount: Int { output.count }

    /// The client hung up or the socket failed: nothing more is served or written.
    mutating func hungUp() {
        state = .closed
        input = []
        inputStart = 0
        output = []
        outputStart = 0
    }

    // MARK: Decisions

    /// The next line to serve, ``Next/tooLong`` once for an over-long line, or ``Next/none``.
    mutating func nextLine() -> Next {
        guard isServing, underLimits else { return .none }
        let available = input.count - inputStart
        guard available > 0 else { return .none }
        guard let newline = newline(from: inputStart + scanned) else {
            scanned = available
            return available > maxLine ? overLong() : .none
        }
        guard newline - inputStart <= maxLine else { return overLong() }
        var end = newline
        if end > inputStart, input[end - 1] == 0x0D { end -= 1 }
        let line = input[inputStart..<end]
        inputStart = newline + 1
        scanned = 0
        return .line(line)
    }

    private mutating func overLong() -> Next {
        input = []
        inputStart = 0
        scanned = 0
        state = .draining
        return .tooLong
    }

    /// Whether the owner should watch the socket for input: open, under the in-flight cap, not holding more unread
    /// output than ``outputLimit``, and no complete line waiting to be served.
    var wantsRead: Bool {
        state == .open && underLimits && !hasCompleteLine
    }

    /// Whether ``nextLine()`` has a line to give now (the owner serves again after writing made room).
    var canServe: Bool {
        isServing && underLimits && hasCompleteLine
    }

    /// Open or draining: lines are served and their replies written (not once refused or closed).
    var isServing: Bool { state == .open || state == .draining }

    /// Whether the owner should watch the socket for room to write.
    var wantsWrite: Bool { state != .closed && pendingOutputCount > 0 }

    /// Whether the connection is done: closed, drained (every line served, every request answered, every reply
    /// written), or refused and the refusal written (requests still in flight are not waited for).
    var isFinished: Bool {
        switch state {
        case .closed: return true
        case .open: return false
        case .draining: return inFlight == 0 && pendingOutputCount == 0 && inputStart == input.count
        case .refusing: return pendingOutputCount == 0
        }
    }

    var pendingOutputCount: Int { output.count - outputStart }

    /// The bytes waiting to be written, for one `send`.
    func withPendingOutput<R>(_ body: (UnsafeRawBufferPointer) -> R) -> R {
        output.withUnsafeBytes { body(UnsafeRawBufferPointer(rebasing: $0[outputStart...])) }
    }

    /// Under the in-flight cap and not holding more unread output than ``outputLimit``: another line may be served.
    private var underLimits: Bool { inFlight < maxInFlight && pendingOutputCount <= outputLimit }

    private var hasCompleteLine: Bool { newline(from: inputStart + scanned) != nil }

    /// The index of the first newline in the input at or after `start` (memchr: this runs for every request).
    private func newline(from start: Int) -> Int? {
        guard start < input.count else { return nil }
        return input.withUnsafeBytes { bytes in
            guard let found = memchr(bytes.baseAddress! + start, 0x0A, bytes.count - start) else { return nil }
            return bytes.baseAddress!.distance(to: UnsafeRawPointer(found))
        }
    }

    /// Drops the served lines' bytes before more arrive (the buffer is reused, not regrown).
    private mutating func compactInput() {
        guard inputStart > 0 else { return }
        if inputStart == input.count {
            input.removeAll(keepingCapacity: input.capacity <= 4096)
        } else {
            input.removeFirst(inputStart)
        }
        inputStart = 0
    }
}
