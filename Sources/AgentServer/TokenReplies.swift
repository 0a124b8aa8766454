import AgentIPC
import AgentService
import AuthCore
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import NIOCore

/// The fast path's pre-encoded replies for one cached token (with and without `id`), kept as the
/// ``TokenSnapshot`` entry's attachment: built on the token's first fast-path use, dropped with the entry when the
/// broker publishes a new token or removes it (logout, `invalid_grant`).
final class TokenReplies: Sendable {
    let withID: TokenReplyTemplate
    let withoutID: TokenReplyTemplate

    private init(withID: TokenReplyTemplate, withoutID: TokenReplyTemplate) {
        self.withID = withID
        self.withoutID = withoutID
    }

    /// Appends the reply line (newline included) for `hit` to `buffer`; false, with nothing written, when it cannot
    /// be pre-encoded (the caller then takes the slow path).
    static func write(_ hit: TokenSnapshot.Hit, id: Int?, snapshot: TokenSnapshot, into buffer: inout ByteBuffer) -> Bool {
        let replies: TokenReplies
        if let attached = hit.attachment as? TokenReplies {
            replies = attached
        } else {
            // Everything but the per-request integers comes from the grant, through the slow path's mapping.
            let result = AgentOperations.tokenResult(hit.grant, includeIDToken: false)
            guard let withID = TokenReplyTemplate.make(result, id: true),
                  let withoutID = TokenReplyTemplate.make(result, id: false) else { return false }
            replies = TokenReplies(withID: withID, withoutID: withoutID)
            snapshot.attach(replies, account: hit.account, generation: hit.generation)
        }
        if replies.withoutID.holes == 0 {
            // A token that does not expire: no expiry to fill in (TokenReplyTemplate.make).
            if let id {
                replies.withID.write(id: id, into: &buffer)
            } else {
                replies.withoutID.write(id: nil, into: &buffer)
            }
            return true
        }
        let expiresAt = Int(hit.expiresAt.timeIntervalSince1970)
        let expiresIn = Int(hit.expiresIn.components.seconds)
        if let id {
            replies.withID.write(id, expiresAt, expiresIn, into: &buffer)
        } else {
            replies.withoutID.write(expiresAt, expiresIn, into: &buffer)
        }
        return true
    }
}
