/// Errors of the socket server itself (start-up and connection handling).
public struct ServerError: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Code: Sendable, Equatable { case runtimeDirectory, socket, alreadyRunning }
    public let code: Code
    public let message: String

    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { message }
}
