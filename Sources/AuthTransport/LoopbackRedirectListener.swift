import AuthCore
import NIOCore
import NIOHTTP1
import NIOPosix
import Glibc

/// The loopback redirect listener (RFC 8252 §7.3, §8.3, Appendix B.5): binds a loopback literal only (the account's
/// preference, or the other one when this machine has no loopback of that family), port 0 unless the account fixes
/// one, without SO_REUSEADDR/SO_REUSEPORT; answers GET on the exact path with a matching Host header; closes when the
/// sign-in ends.
///
/// Hostile local clients: each connection may send at most ``maxRequestBytes`` and ``maxHeaderCount`` headers, and
/// lives at most ``connectionDeadline``; connections are independent, so idle or slow ones never delay the browser's.
/// At most ``maxConnections`` are open at once (the oldest makes room: see ``RedirectConnections``), and all of them
/// are closed with the listener, so none outlives the sign-in.
public struct LoopbackRedirectListenerFactory: RedirectListenerFactory {
    /// A redirect is one GET with a short query; browsers send well under 8 KiB of headers.
    public static let maxRequestBytes = 16 * 1024
    public static let maxHeaderCount = 64
    /// Every connection is closed this long after it was accepted, whatever it did (idle or trickling bytes).
    public static let connectionDeadline: TimeAmount = .seconds(10)
    /// Simultaneous connections: a browser uses one or two; the cap bounds what a local client can make us hold.
    public static let maxConnections = 64

    let group: any EventLoopGroup
    let limits: Limits

    struct Limits: Sendable {
        var maxRequestBytes = LoopbackRedirectListenerFactory.maxRequestBytes
        var maxHeaderCount = LoopbackRedirectListenerFactory.maxHeaderCount
        var connectionDeadline = LoopbackRedirectListenerFactory.connectionDeadline
        var maxConnections = LoopbackRedirectListenerFactory.maxConnections
    }

    public init(group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton) {
        self.init(group: group, limits: Limits())
    }

    init(group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton, limits: Limits) {
        self.group = group
        self.limits = limits
    }

    public func listen(host: LoopbackHost, port: UInt16, path: String,
                       judge: @escaping @Sendable (String?) -> RedirectPage) async throws(AuthError) -> any RedirectListener {
        do {
            return try await bind([(host.address, host.uriLiteral), (host.fallback.address, host.fallback.uriLiteral)],
                                  port: port, path: path, judge: judge)
        } catch let error as AuthError {
            throw error
        } catch {
            throw AuthError(.loginFailed, "cannot open the redirect listener on \(host.uriLiteral):\(port): \(error)")
        }
    }

    /// Binds the first candidate (address, URI literal) that this machine has. Only "no such address here" moves
    /// on to the next: a port in use (perhaps taken by another user) is an error, never a reason to switch family.
    func bind(_ candidates: [(address: String, literal: String)], port: UInt16, path: String,
              judge: @escaping @Sendable (String?) -> RedirectPage) async throws -> LoopbackRedirectListener {
        var lastError: (any Error)?
        for (address, literal) in candidates {
            do {
                let connections = RedirectConnections(limit: limits.maxConnections)
                let channel = try await bootstrap(literal: literal, path: path, connections: connections, judge: judge)
                    .bind(to: SocketAddress(ipAddress: address, port: Int(port)))
                    .get()
                guard let bound = channel.localAddress?.port else {
                    try? await channel.close()
                    throw AuthError.internalError("the redirect listener has no port")
                }
                return LoopbackRedirectListener(channel: channel, connections: connections,
                                                redirectURI: "http://\(literal):\(bound)\(path)")
            } catch let error as IOError where error.errnoCode == EADDRNOTAVAIL || error.errnoCode == EAFNOSUPPORT {
                lastError = error
                continue
            }
        }
        throw lastError ?? AuthError.internalError("no loopback address to bind")
    }

    private func bootstrap(literal: String, path: String, connections: RedirectConnections,
                           judge: @escaping @Sendable (String?) -> RedirectPage) -> ServerBootstrap {
        let limits = self.limits
        return ServerBootstrap(group: group)
            .serverChannelOption(ChannelOptions.backlog, value: 128)
            .childChannelOption(ChannelOptions.maxMessagesPerRead, value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    connections.admit(channel)
                    try LoopbackRedirectListenerFactory.configure(channel, literal: literal, path: path, limits: limits, judge: judge)
                }
            }
    }

    /// One accepted connection's pipeline (also driven directly by Tests/FuzzTests).
    static func configure(_ channel: any Channel, literal: String, path: String, limits: Limits,
                          judge: @escaping @Sendable (String?) -> RedirectPage) throws {
        // Before the HTTP decoder, so an endless request line or header block is cut off unparsed.
        try channel.pipeline.syncOperations.addHandler(RequestSizeLimiter(limit: limits.maxRequestBytes))
        try channel.pipeline.syncOperations.configureHTTPServerPipeline(withErrorHandling: true)
        try channel.pipeline.syncOperations.addHandler(
            RedirectRequestHandler(path: path, hostLiteral: literal, maxHeaderCount: limits.maxHeaderCount, judge: judge))
        channel.eventLoop.scheduleTask(in: limits.connectionDeadline) { channel.close(promise: nil) }
    }
}

final class LoopbackRedirectListener: RedirectListener {
    let channel: any Channel
    let connections: RedirectConnections
    let redirectURI: String

    init(channel: any Channel, connections: RedirectConnections, redirectURI: String) {
        self.channel = channel
        self.connections = connections
        self.redirectURI = redirectURI
    }

    /// Stops accepting, then closes the connections already accepted (idle or half-sent ones would otherwise live
    /// until their deadline after the sign-in is over).
    func close() async {
        try? await channel.close()
        connections.closeAll()
    }
}

/// One HTTP connection to the listener. Nothing from the request is ever echoed into the reply.
final class RedirectRequestHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    let path: String
    /// `127.0.0.1` or `[::1]`, as bound: the only acceptable `Host` (with the port).
    let hostLiteral: String
    let maxHeaderCount: Int
    let judge: @Sendable (String?) -> RedirectPage
    private var head: HTTPRequestHead?

    init(path: String, hostLiteral: String, maxHeaderCount: Int, judge: @escaping @Sendable (String?) -> RedirectPage) {
        self.path = path
        self.hostLiteral = hostLiteral
        self.maxHeaderCount = maxHeaderCount
        self.judge = judge
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head): self.head = head
        case .body: break
        case .end:
            guard let head else { return }
            self.head = nil
            respond(context: context, to: head)
        }
    }

    private func respond(context: ChannelHandlerContext, to head: HTTPRequestHead) {
        guard head.headers.count <= maxHeaderCount else {
            return write(context, .requestHeaderFieldsTooLarge, RedirectPages.invalid)
        }
        let (requestPath, query) = RedirectRequestHandler.split(head.uri)
        guard requestPath == path else { return write(context, .notFound, RedirectPages.notFound) }
        guard head.method == .GET else { return write(context, .methodNotAllowed, RedirectPages.invalid) }
        let port = context.channel.localAddress?.port ?? 0
        let hosts = head.headers["Host"]
        guard hosts.count == 1, hosts[0] == "\(hostLiteral):\(port)" else {
            return write(context, .badRequest, RedirectPages.invalid)
        }
        switch judge(query) {
        case .success: write(context, .ok, RedirectPages.success)
        case .denied: write(context, .ok, RedirectPages.denied)
        case .invalid: write(context, .badRequest, RedirectPages.invalid)
        }
    }

    static func split(_ uri: String) -> (String, String?) {
        guard let mark = uri.firstIndex(of: "?") else { return (uri, nil) }
        return (String(uri[..<mark]), String(uri[uri.index(after: mark)...]))
    }

    private func write(_ context: ChannelHandlerContext, _ status: HTTPResponseStatus, _ page: String) {
        var headers = HTTPHeaders()
        headers.add(name: "Content-Type", value: "text/html; charset=utf-8")
        headers.add(name: "Content-Length", value: "\(page.utf8.count)")
        headers.add(name: "Cache-Control", value: "no-store")
        headers.add(name: "Pragma", value: "no-cache")
        headers.add(name: "Referrer-Policy", value: "no-referrer")
        headers.add(name: "Content-Security-Policy", value: "default-src 'none'; style-src 'unsafe-inline'")
        headers.add(name: "X-Content-Type-Options", value: "nosniff")
        headers.add(name: "X-Frame-Options", value: "DENY")
        headers.add(name: "Connection", value: "close")
        context.write(wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: status, headers: headers))), promise: nil)
        context.write(wrapOutboundOut(.body(.byteBuffer(ByteBuffer(string: page)))), promise: nil)
        context.writeAndFlush(wrapOutboundOut(.end(nil))).whenComplete { _ in context.close(promise: nil) }
    }
}

/// Cuts a connection off once it has sent more than `limit` bytes: one redirect is a short GET, so anything longer
/// is hostile. Answers 431 (raw bytes: it sits before the HTTP codec) and closes; nothing reaches the decoder after.
final class RequestSizeLimiter: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer
    typealias OutboundOut = ByteBuffer

    let limit: Int
    private var received = 0
    private var tripped = false

    init(limit: Int) { self.limit = limit }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !tripped else { return }
        received += unwrapInboundIn(data).readableBytes
        guard received <= limit else {
            tripped = true
            let reply = "HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Length: 0\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n"
            context.writeAndFlush(wrapOutboundOut(ByteBuffer(string: reply))).whenComplete { _ in context.close(promise: nil) }
            return
        }
        context.fireChannelRead(data)
    }
}

/// Static pages: no scripts, no third-party resources, nothing taken from the request.
enum RedirectPages {
    static func page(_ title: String, _ text: String) -> String {
        """
        <!doctype html><html lang="en"><head><meta charset="utf-8"><title>\(title)</title>\
        <style>body{font:16px system-ui,sans-serif;margin:4em auto;max-width:32em;color:#222}</style></head>\
        <body><h1>\(title)</h1><p>\(text)</p></body></html>
        """
    }
    static let success = page("Signed in", "auth-agent has received the sign-in. You can close this tab.")
    static let denied = page("Sign-in not completed", "The sign-in was declined. You can close this tab; run authctl login again to retry.")
    static let invalid = page("Not a valid sign-in response", "This response does not belong to a pending sign-in and was ignored.")
    static let notFound = page("Not found", "Nothing here.")
}
