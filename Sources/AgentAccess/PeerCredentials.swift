/// The kernel's view of who is on the other end of a Unix socket (`SO_PEERCRED`, read by ``AcceptLoop`` through
/// `aa_socket_peer_credentials`; the bus daemon's credentials on D-Bus).
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
}
