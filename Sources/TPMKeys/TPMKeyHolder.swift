import AuthCore
import CAgentTPM
import Dispatch
import FoundationEssentials
import Synchronization

/// ``KeyHolder`` over the TPM named by `[agent] tpm_tcti`, through tpm2-tss (`CAgentTPM`'s `aa_tpm_*`).
///
/// Every call runs on one serial queue of its own, never on the Swift concurrency pool, and its caller is answered
/// by its deadline whatever the TPM does (`tpm_unavailable`), as a keyring call is: a TPM that never answers holds
/// the queue, and the calls queued behind it whose deadline passed are dropped without running. One connection is
/// kept open between calls (with the owner hierarchy's primary key loaded in it, which a real TPM takes tens of
/// milliseconds to make); a call that fails for want of an answer closes it, and is tried once more on a new one, so
/// a resource manager or simulator that restarted is found again by the next call.
public final class TPMKeyHolder: KeyHolder, @unchecked Sendable {
    /// The TCTI string, as configured.
    public let tcti: String
    let timeout: Duration
    private let queue = DispatchQueue(label: "dev.auth-agent.tpm")
    /// The open connection. Only touched on `queue`.
    private var connection: OpaquePointer?

    public init(tcti: String, timeout: Duration = .seconds(10)) {
        self.tcti = tcti
        self.timeout = timeout
    }

    deinit { aa_tpm_close(connection) }

    public func createKey() async throws(AuthError) -> HeldKey {
        try await call { tpm throws(TPMCallError) -> HeldKey in
            var blob = [UInt8](repeating: 0, count: Int(AA_TPM_BLOB_MAX))
            var x = [UInt8](repeating: 0, count: 66), y = [UInt8](repeating: 0, count: 66)
            var blobLength = 0, xLength = 0, yLength = 0
            var stage: Int32 = 0
            let rc = aa_tpm_create(tpm, &blob, blob.count, &blobLength, &x, &xLength, &y, &yLength, &stage)
            guard rc == 0 else { throw TPMCallError.failed(TPMFailure(code: rc, stage: TPMFailure.Stage(rawValue: stage) ?? .create)) }
            guard let key = HeldKey(x: Data(x[..<xLength]), y: Data(y[..<yLength]), blob: Data(blob[..<blobLength])) else {
                throw TPMCallError.malformed("the TPM returned a key that is not a P-256 point")
            }
            return key
        }
    }

    public func sign(digest: Data, with key: HeldKey) async throws(AuthError) -> Data {
        guard digest.count == 32 else { throw AuthError.internalError("a TPM signature needs a SHA-256 digest") }
        return try await call { tpm throws(TPMCallError) -> Data in
            let blob = [UInt8](key.blob), message = [UInt8](digest)
            var r = [UInt8](repeating: 0, count: 66), s = [UInt8](repeating: 0, count: 66)
            var rLength = 0, sLength = 0
            var stage: Int32 = 0
            let rc = aa_tpm_sign(tpm, blob, blob.count, message, &r, &rLength, &s, &sLength, &stage)
            guard rc == 0 else { throw TPMCallError.failed(TPMFailure(code: rc, stage: TPMFailure.Stage(rawValue: stage) ?? .sign)) }
            guard let signature = HeldKey.jwsSignature(r: Data(r[..<rLength]), s: Data(s[..<sLength])) else {
                throw TPMCallError.malformed("the TPM returned a signature that is not a P-256 one")
            }
            return signature
        }
    }

    public func check() async -> KeyHolderCheck {
        do throws(AuthError) {
            try await call { tpm throws(TPMCallError) in
                var stage: Int32 = 0
                let rc = aa_tpm_probe(tpm, &stage)
                guard rc == 0 else { throw TPMCallError.failed(TPMFailure(code: rc, stage: .connect)) }
            }
            return KeyHolderCheck(place: tcti, problem: nil)
        } catch {
            return KeyHolderCheck(place: tcti, problem: error)
        }
    }

    /// Runs `body` on the queue with an open connection, within the deadline.
    private func call<Value: Sendable>(
        _ body: @escaping @Sendable (OpaquePointer) throws(TPMCallError) -> Value
    ) async throws(AuthError) -> Value {
        let answer = Answer<Value>()
        let seconds = Int(timeout.components.seconds)
        let place = tcti
        let result: Result<Value, AuthError> = await withCheckedContinuation { continuation in
            answer.start(continuation)
            let timer = DispatchSource.makeTimerSource(queue: .global())
            timer.setEventHandler {
                answer.resume(.failure(AuthError(.tpmUnavailable, "the TPM at \(place) did not answer within \(seconds) s")))
            }
            timer.schedule(deadline: .now() + .seconds(seconds))
            answer.keep(timer)
            timer.activate()
            queue.async {
                defer { answer.cancelTimer() }
                // Its deadline passed while it waited behind a stuck call.
                guard !answer.answered else { return }
                answer.resume(self.onQueue(body))
            }
        }
        return try result.get()
    }

    /// On the queue: opens the connection if none is open, runs `body`; a failure for want of an answer on a
    /// connection opened earlier closes it and runs `body` once more on a new one.
    private func onQueue<Value>(_ body: (OpaquePointer) throws(TPMCallError) -> Value) -> Result<Value, AuthError> {
        var reused = connection != nil
        while true {
            if connection == nil {
                var opened: OpaquePointer?
                let rc = aa_tpm_open(tcti, &opened)
                guard rc == 0, let opened else {
                    if let problem = TPMPlace(tcti: tcti).deviceProblem() {
                        return .failure(AuthError(.tpmUnavailable, "no TPM answers at \(tcti): \(problem)"))
                    }
                    return .failure(TPMFailure(code: rc, stage: .connect).error(detail: text(rc), place: tcti))
                }
                connection = opened
            }
            guard let tpm = connection else { continue }
            do throws(TPMCallError) {
                return .success(try body(tpm))
            } catch {
                switch error {
                case .malformed(let text):
                    return .failure(AuthError(.tpmUnavailable, "\(text) (at \(tcti))"))
                case .failed(let failure):
                    if failure.kind == .unavailable {
                        aa_tpm_close(connection)
                        connection = nil
                        if reused {
                            reused = false
                            continue
                        }
                    }
                    return .failure(failure.error(detail: text(failure.code), place: tcti))
                }
            }
        }
    }

    private func text(_ rc: UInt32) -> String {
        aa_tpm_rc_text(rc).map { String(cString: $0) } ?? "TSS2 response code \(rc)"
    }
}

/// How a call on the queue failed.
enum TPMCallError: Error {
    case failed(TPMFailure)
    case malformed(String)
}

/// One call's continuation, resumed exactly once: by the call or by its deadline, whichever comes first.
private final class Answer<Value: Sendable>: Sendable {
    private let state = Mutex<(continuation: CheckedContinuation<Result<Value, AuthError>, Never>?, done: Bool)>((nil, false))
    /// The deadline's timer, freed as soon as the call returns.
    private let timer = Mutex<TimerBox?>(nil)

    /// A dispatch source is thread-safe; Dispatch does not say so to Swift.
    struct TimerBox: @unchecked Sendable {
        let timer: any DispatchSourceTimer
    }

    func keep(_ timer: any DispatchSourceTimer) {
        let box = TimerBox(timer: timer)
        self.timer.withLock { $0 = box }
    }

    func cancelTimer() {
        let box = self.timer.withLock { timer -> TimerBox? in
            defer { timer = nil }
            return timer
        }
        box?.timer.cancel()
    }

    func start(_ continuation: CheckedContinuation<Result<Value, AuthError>, Never>) {
        state.withLock { $0.continuation = continuation }
    }

    var answered: Bool { state.withLock { $0.done } }

    func resume(_ result: Result<Value, AuthError>) {
        let continuation = state.withLock { state -> CheckedContinuation<Result<Value, AuthError>, Never>? in
            guard !state.done else { return nil }
            state.done = true
            defer { state.continuation = nil }
            return state.continuation
        }
        continuation?.resume(returning: result)
    }
}
