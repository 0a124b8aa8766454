import AuthCore
import NIOCore
import NIOHTTP1
import NIOPosix

/// The loopback redirect listener (RFC 8252 §7.3, §8.3, Appendix B.5): binds the literal 127.0.0.1 only, port 0
/// unless the account fixes one, without SO_REUSEADDR/SO_REUSEPORT; answers GET on the exact path with a matching
/// Host header; closes when the sign-in ends.
public struct LoopbackRedirectListenerFactory: RedirectListenerFactory {
    public static let host = "127.0.0.1"
    let group: any EventLoopGroup

    public init(group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton) { self.group = group }

    public func listen(port: UInt16, path: String,
                       judge: @escaping @Sendable (String?) -> RedirectPage) async throws(AuthError) -> any RedirectListener {
        do {
            let channel = try await ServerBootstrap(group: group)
                .serverChannelOption(ChannelOptions.backlog, value: 64)
                .childChannelOption(ChannelOptions.maxMessagesPerRead, value: 1)
                .childChannelInitializer { channel in
                    channel.eventLoop.makeCompletedFuture {
                        try channel.pipeline.syncOperations.configureHTTPServerPipeline(withErrorHandling: true)
                        try channel.pipeline.syncOperations.addHandler(
                            RedirectRequestHandler(path: path, judge: judge))
                        // A connection that sends nothing useful cannot hold a slot for long.
                        channel.eventLoop.scheduleTask(in: .seconds(10)) { channel.close(promise: nil) }
                    }
                }
                .bind(host: LoopbackRedirectListenerFactory.host, port: Int(port))
                .get()
            guard let bound = channel.localAddress?.port else {
                try? await channel.close()
                throw AuthError.internalError("the redirect listener has no port")
            }
            return LoopbackRedirectListener(channel: channel, redirectURI: "http://\(LoopbackRedirectListenerFactory.host):\(bound)\(path)")
        } catch let error as AuthError {
            throw error
        } catch {
            throw AuthError(.loginFailed, "cannot open the redirect listener on \(LoopbackRedirectListenerFactory.host):\(port): \(error)")
        }
    }
}

final class LoopbackRedirectListener: RedirectListener {
    let channel: any Channel
    let redirectURI: String

    init(channel: any Channel, redirectURI: String) {
        self.channel = channel
        self.redirectURI = redirectURI
    }

    func close() async {
        try? await channel.close()
    }
}

/// One HTTP connection to the listener. Nothing from the request is ever echoed into the reply.
final class RedirectRequestHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    let path: String
    let judge: @Sendable (String?) -> RedirectPage
    private var head: HTTPRequestHead?

    init(path: String, judge: @escaping @Sendable (String?) -> RedirectPage) {
        self.path = path
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
        let (requestPath, query) = RedirectRequestHandler.split(head.uri)
        guard requestPath == path else { return write(context, .notFound, RedirectPages.notFound) }
        guard head.method == .GET else { return write(context, .methodNotAllowed, RedirectPages.invalid) }
        let port = context.channel.localAddress?.port ?? 0
        let hosts = head.headers["Host"]
        guard hosts.count == 1, hosts[0] == "\(LoopbackRedirectListenerFactory.host):\(port)" else {
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
