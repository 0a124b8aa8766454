import AsyncHTTPClient
import AuthCore
import FoundationEssentials
import NIOCore
import NIOHTTP1
import NIOSSL

/// ``HTTPTransport`` over AsyncHTTPClient: TLS with certificate checks (system trust store), no redirects followed
/// (a token request must never be replayed elsewhere), bounded time and body size. Certificate failures are
/// `tls_error`; a body over ``maxBodyBytes`` comes back as ``HTTPReply/bodyTooLarge`` for the parser to refuse.
public final class HTTPClientTransport: HTTPTransport {
    public static let maxBodyBytes = 1024 * 1024
    /// How long a connection to a server is kept open for the next request: the requests of a sign-in and the
    /// refreshes of several accounts due together share it; an hourly refresh opens its own. (The agent's idle hook
    /// runs again once these have closed: AcceptLoop.idleHookAgain.)
    public static let idleConnectionLifetime: TimeAmount = .seconds(30)
    let client: HTTPClient
    let timeout: TimeAmount
    let userAgent: String

    /// `timeout` bounds each whole exchange (connect, request, head and body); `[agent] http_timeout` sets it.
    public init(userAgent: String, connectTimeout: TimeAmount = .seconds(10), timeout: TimeAmount = .seconds(30)) {
        var configuration = HTTPClient.Configuration(redirectConfiguration: .disallow,
                                                     timeout: .init(connect: min(connectTimeout, timeout), read: timeout))
        configuration.httpVersion = .http1Only
        // A failed connection (refused, or a certificate that does not verify) fails this request at once with its
        // real cause; retrying is the broker's job (backoff with jitter), not a silent loop until the deadline.
        configuration.connectionPool.retryConnectionEstablishment = false
        configuration.connectionPool.idleTimeout = HTTPClientTransport.idleConnectionLifetime
        self.client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
        self.timeout = timeout
        self.userAgent = userAgent
    }

    public func shutdown() async {
        try? await client.shutdown()
    }

    public func get(_ url: URL) async throws(AuthError) -> HTTPReply {
        var request = HTTPClientRequest(url: url.absoluteString)
        request.method = .GET
        request.headers.add(name: "Accept", value: "application/json")
        return try await execute(request, url: url)
    }

    public func postForm(_ url: URL, fields: [(String, String)], basicAuth: (user: String, password: Secret)?,
                  headers: [(String, String)]) async throws(AuthError) -> HTTPReply {
        var request = HTTPClientRequest(url: url.absoluteString)
        request.method = .POST
        request.headers.add(name: "Accept", value: "application/json")
        request.headers.add(name: "Content-Type", value: "application/x-www-form-urlencoded")
        if let basicAuth {
            let credentials = Data("\(basicAuth.user):\(basicAuth.password.reveal())".utf8).base64EncodedString()
            request.headers.add(name: "Authorization", value: "Basic \(credentials)")
        }
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        let body = fields.map { "\(LoginSession.formEncode($0.0))=\(LoginSession.formEncode($0.1))" }.joined(separator: "&")
        request.body = .bytes(ByteBuffer(string: body))
        return try await execute(request, url: url)
    }

    private func execute(_ request: HTTPClientRequest, url: URL) async throws(AuthError) -> HTTPReply {
        var request = request
        request.headers.add(name: "User-Agent", value: userAgent)
        let where_ = url.absoluteString.split(separator: "?", maxSplits: 1).first.map(String.init) ?? "?"
        // One deadline for the whole exchange: AsyncHTTPClient's own deadline ends with the response head, so a
        // server that sends its body a byte at a time would otherwise hold the refresh for as long as it likes.
        let deadline = NIODeadline.now() + timeout
        do {
            let response = try await client.execute(request, deadline: deadline)
            let collected = try await HTTPClientTransport.collect(response.body, before: deadline)
            guard let body = collected else {
                // Capped, and reported by the caller's parser as a malformed answer (not as a server outage).
                return HTTPReply(status: Int(response.status.code), body: [], retryAfter: response.headers.first(name: "Retry-After"),
                                 bodyTooLarge: true)
            }
            return HTTPReply(status: Int(response.status.code), body: Array(buffer: body),
                             retryAfter: response.headers.first(name: "Retry-After"), date: response.headers.first(name: "Date"),
                             dpopNonce: response.headers.first(name: "DPoP-Nonce"))
        } catch let error as AuthError {
            throw error
        } catch {
            if HTTPClientTransport.isTLSFailure(error) {
                throw AuthError(.tlsError, "the TLS connection to \(where_) failed: \(HTTPClientTransport.describeTLS(error))")
            }
            throw AuthError(.serverUnreachable, "cannot reach \(where_): \(HTTPClientTransport.describe(error))")
        }
    }

    /// The body, or nil when it is larger than ``maxBodyBytes`` (reading stops there). Throws `deadlineExceeded`
    /// when the deadline passes first.
    static func collect(_ body: HTTPClientResponse.Body, before deadline: NIODeadline) async throws -> ByteBuffer? {
        try await withThrowingTaskGroup(of: ByteBuffer?.self) { group in
            group.addTask {
                do {
                    return try await body.collect(upTo: HTTPClientTransport.maxBodyBytes)
                } catch is NIOTooManyBytesError {
                    return nil
                }
            }
            group.addTask {
                let remaining = deadline - NIODeadline.now()
                try await Task.sleep(nanoseconds: UInt64(max(remaining.nanoseconds, 0)))
                throw HTTPClientError.deadlineExceeded
            }
            defer { group.cancelAll() }
            return try await group.next()!
        }
    }

    /// Certificate and handshake failures: a distinct `tls_error`, never mixed up with "the network is down".
    static func isTLSFailure(_ error: any Error) -> Bool {
        error is NIOSSLError || error is BoringSSLError || error is NIOSSLExtraError
    }

    /// A TLS failure in words, with BoringSSL's reason (e.g. CERTIFICATE_VERIFY_FAILED) but not its source paths.
    static func describeTLS(_ error: any Error) -> String {
        if let error = error as? NIOSSLExtraError, error == .failedToValidateHostname {
            return "the server's certificate does not name this host"
        }
        let text = "\(error)"
        // The first "OPENSSL_internal:" followed by a reason code ([A-Z0-9_]+).
        let isCode = { (c: Character) in c.isASCII && (c.isUppercase || c.isNumber || c == "_") }
        guard let reason = text.ranges(of: "OPENSSL_internal:").lazy
            .map({ text[$0.upperBound...].prefix(while: isCode) }).first(where: { !$0.isEmpty }) else {
            return "the TLS handshake failed"
        }
        if reason == "CERTIFICATE_VERIFY_FAILED" {
            return "the server's certificate does not verify against the system's trusted CAs (CERTIFICATE_VERIFY_FAILED)"
        }
        return "the TLS handshake failed (\(reason))"
    }

    /// A short, secret-free description of a transport failure.
    static func describe(_ error: any Error) -> String {
        if let error = error as? HTTPClientError {
            switch error {
            case .connectTimeout: return "connection timed out"
            case .readTimeout, .deadlineExceeded: return "the server did not answer in time"
            case .remoteConnectionClosed: return "the server closed the connection"
            default: return "\(error)"
            }
        }
        let text = "\(error)"
        return text.count > 200 ? String(text.prefix(200)) + "..." : text
    }
}
