import FoundationEssentials

/// A Kubernetes `ExecCredential` (`client.authentication.k8s.io/v1`), the object a kubectl exec credential plugin
/// prints on stdout: a bearer token and when kubectl must ask again.
public struct ExecCredential: Codable, Sendable, Equatable {
    public static let apiVersion = "client.authentication.k8s.io/v1"

    public struct Status: Codable, Sendable, Equatable {
        public var token: String
        /// RFC 3339, UTC. kubectl reuses the token until then and runs the plugin again after. Absent for a token
        /// that does not expire: kubectl then keeps it until the cluster answers 401 (client-go's exec plugin docs).
        public var expirationTimestamp: String?
    }

    public var apiVersion: String
    public var kind: String
    public var status: Status

    /// `expiresAt` nil: the token does not expire, and the credential says no expiry.
    public init(token: String, expiresAt unixSeconds: Int?) {
        self.apiVersion = Self.apiVersion
        self.kind = "ExecCredential"
        self.status = Status(token: token, expirationTimestamp: unixSeconds.map { RFC3339.utc(unixSeconds: $0) })
    }

    /// One line of JSON with sorted keys (stable output for people and tests).
    public func json() -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        // Encoding three strings cannot fail.
        let data = (try? encoder.encode(self)) ?? Data()
        return String(decoding: data, as: UTF8.self)
    }
}
