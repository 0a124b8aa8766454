import AuthCore
import Foundation

/// Ports for unit tests of code above the broker (the socket's fast path, the D-Bus mapping) that must never reach
/// a network, a listener or a browser: each refuses, as the real adapter would without them.
public struct NoHTTP: HTTPTransport {
    public init() {}
    public func get(_ url: URL) async throws(AuthError) -> HTTPReply { throw AuthError(.serverUnreachable, "no network in unit tests") }
    public func postForm(_ url: URL, fields: [(String, String)], basicAuth: (user: String, password: Secret)?,
                  headers: [(String, String)]) async throws(AuthError) -> HTTPReply {
        throw AuthError(.serverUnreachable, "no network in unit tests")
    }
}

public struct NoRedirects: RedirectListenerFactory {
    public init() {}
    public func listen(host: LoopbackHost, port: UInt16, path: String,
                       judge: @escaping @Sendable (String?) -> RedirectPage) async throws(AuthError) -> any RedirectListener {
        throw AuthError(.loginFailed, "no listener in unit tests")
    }
}

public struct NoBrowser: BrowserLauncher {
    public init() {}
    public func open(_ url: URL) throws(AuthError) {}
}
