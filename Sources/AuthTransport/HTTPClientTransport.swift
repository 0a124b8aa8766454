import AsyncHTTPClient
import AuthCore
import Foundation
import NIOCore
import NIOHTTP1

/// ``HTTPTransport`` over AsyncHTTPClient: TLS with certificate checks (system trust store), no redirects followed
/// (a token request must never be replayed elsewhere), bounded time and body size.
public final class HTTPClientTransport: HTTPTransport {
    public static let maxBodyBytes = 1024 * 1024
    let client: HTTPClient
    let timeout: TimeAmount
    let userAgent: String

    public init(userAgent: String, connectTimeout: TimeAmount = .seconds(10), timeout: TimeAmount = .seconds(30)) {
        var configuration = HTTPClient.Configuration(redirectConfiguration: .disallow,
                                                     timeout: .init(connect: connectTimeout, read: timeout))
        configuration.httpVersion = .http1Only
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

    public func postForm(_ url: URL, fields: [(String, String)], basicAuth: (user: String, password: Secret)?) async throws(AuthError) -> HTTPReply {
        var request = HTTPClientRequest(url: url.absoluteString)
        request.method = .POST
        request.headers.add(name: "Accept", value: "application/json")
        request.headers.add(name: "Content-Type", value: "application/x-www-form-urlencoded")
        if let basicAuth {
            let credentials = Data("\(basicAuth.user):\(basicAuth.password.reveal())".utf8).base64EncodedString()
            request.headers.add(name: "Authorization", value: "Basic \(credentials)")
        }
        let body = fields.map { "\(LoginSession.formEncode($0.0))=\(LoginSession.formEncode($0.1))" }.joined(separator: "&")
        request.body = .bytes(ByteBuffer(string: body))
        return try await execute(request, url: url)
    }

    private func execute(_ request: HTTPClientRequest, url: URL) async throws(AuthError) -> HTTPReply {
        var request = request
        request.headers.add(name: "User-Agent", value: userAgent)
        let where_ = url.absoluteString.split(separator: "?", maxSplits: 1).first.map(String.init) ?? "?"
        do {
            let response = try await client.execute(request, timeout: timeout)
            let body: ByteBuffer
            do {
                body = try await response.body.collect(upTo: HTTPClientTransport.maxBodyBytes)
            } catch is NIOTooManyBytesError {
                throw AuthError(.serverError, "\(where_) sent a response larger than \(HTTPClientTransport.maxBodyBytes) bytes")
            }
            return HTTPReply(status: Int(response.status.code), body: Array(buffer: body),
                             retryAfter: response.headers.first(name: "Retry-After"), date: response.headers.first(name: "Date"))
        } catch let error as AuthError {
            throw error
        } catch {
            throw AuthError(.serverUnreachable, "cannot reach \(where_): \(HTTPClientTransport.describe(error))")
        }
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
