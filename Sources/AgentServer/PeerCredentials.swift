#if canImport(Glibc)
import Glibc
#endif
import NIOCore

/// The kernel's view of who is on the other end of a Unix socket (`SO_PEERCRED`). Same layout as `struct ucred`,
/// which Swift cannot see without _GNU_SOURCE.
public struct PeerCredentials: Sendable, Equatable, CustomStringConvertible {
    public var pid: Int32
    public var uid: UInt32
    public var gid: UInt32

    public init(pid: Int32, uid: UInt32, gid: UInt32) {
        self.pid = pid
        self.uid = uid
        self.gid = gid
    }

    public var description: String { "pid=\(pid) uid=\(uid) gid=\(gid)" }

    #if os(Linux)
    static let option = NIOBSDSocket.Option(rawValue: SO_PEERCRED)
    #else
    static let option = NIOBSDSocket.Option(rawValue: 0x1001)
    #endif

    /// `SO_PEERPIDFD` (Linux 6.5+; glibc 2.36's headers do not name it yet): a pidfd for the process that connected.
    static let pidfdOption = NIOBSDSocket.Option(rawValue: 77)

    /// A pidfd for the peer, or nil when the kernel does not offer one (the caller is then pinned by its start
    /// time alone). Must run on the channel's event loop.
    static func pidfd(of channel: any Channel) -> EventLoopFuture<ProcessFD?> {
        guard let provider = channel as? any SocketOptionProvider else { return channel.eventLoop.makeSucceededFuture(nil) }
        return provider.unsafeGetSocketOption(level: .socket, name: pidfdOption).map { (fd: Int32) -> ProcessFD? in
            fd >= 0 ? ProcessFD(fd: fd) : nil
        }.recover { _ in nil }
    }

    /// Reads the credentials of a connected channel. Must run on the channel's event loop.
    static func of(_ channel: any Channel) -> EventLoopFuture<PeerCredentials> {
        guard let provider = channel as? any SocketOptionProvider else {
            return channel.eventLoop.makeFailedFuture(ServerError.peerCredentialsUnavailable)
        }
        return provider.unsafeGetSocketOption(level: .socket, name: option)
    }
}
