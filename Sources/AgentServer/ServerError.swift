/// Errors of the socket server itself (start-up and connection handling).
public struct ServerError: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Code: Sendable, Equatable { case runtimeDirectory, socket, alreadyRunning, peerRejected, peerCredentialsUnavailable }
    public let code: Code
    public let message: String

    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { message }

    static let peerCredentialsUnavailable = ServerError(.peerCredentialsUnavailable, "cannot read SO_PEERCRED")
    static func peerRejected(_ credentials: PeerCredentials) -> ServerError {
        ServerError(.peerRejected, "refused a connection from another user (\(credentials))")
    }
}
