import Glibc

/// A failure of a libsystemd call, with the negative errno it returned turned into a code and a message.
public struct SystemdError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The call that failed, e.g. `sd_listen_fds`.
    public let function: String
    /// The (positive) errno.
    public let errno: Int32
    public let message: String

    init(_ function: String, returned result: Int32) {
        self.function = function
        self.errno = -result
        self.message = String(cString: strerror(-result))
    }

    public var description: String { "\(function): \(message) (errno \(errno))" }
}
