import CLibsecret

/// A GError copied into Swift (kind and message) so the C error can be freed on the queue that made it.
struct LibsecretFailure: Sendable, Equatable {
    enum Kind: Sendable, Equatable {
        case cancelled, locked, noService, timedOut, other
    }
    var kind: Kind
    var message: String
    /// The call was cancelled because our deadline passed (not because the calling task was cancelled).
    var deadlinePassed: Bool

    init(_ error: UnsafeMutablePointer<GError>, deadlinePassed: Bool) {
        switch Int(aa_secret_error_kind(error)) {
        case AA_ERROR_CANCELLED: kind = .cancelled
        case AA_ERROR_LOCKED: kind = .locked
        case AA_ERROR_NO_SERVICE: kind = .noService
        case AA_ERROR_TIMED_OUT: kind = .timedOut
        default: kind = .other
        }
        message = aa_secret_error_message(error).map { String(cString: $0) } ?? ""
        self.deadlinePassed = deadlinePassed
    }

    /// The caller was answered before libsecret returned: the deadline passed, or the calling task was cancelled.
    init(gaveUpAfterDeadline deadlinePassed: Bool) {
        kind = .cancelled
        message = ""
        self.deadlinePassed = deadlinePassed
    }
}
