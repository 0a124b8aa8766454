/// How a client reads one reply line to its request (docs/PROTOCOL.md, "Replies"): pure, so that ``AgentClient`` and
/// the libFuzzer target `reply_line` (Tests/LibFuzzer) run the same code. The line is read by the protocol's strict
/// reader (``MiniJSON``), as the agent reads requests, and must carry protocol version 1, an integer `id` or none,
/// exactly one of `event`, `error` and `result` (`null` reads as absent), and an `id` that says it answers this
/// request (``answers(_:id:isError:)``).
enum ReplyReader {
    /// One reply line to request `id`: nil after passing an event to `onEvent`, else the result or the error it
    /// carries (thrown as ``ClientError/agent(_:)``); anything else is ``ClientError/protocolViolation(_:)``.
    static func read<R: Decodable>(_ reply: [UInt8], as: R.Type, request id: Int,
                                   onEvent: (WireEvent) -> Void) throws(ClientError) -> R? {
        guard let line = MiniJSON.parse(reply), case .object = line, case .integer(let version)? = line["v"],
              let replyID = line.int("id") else {
            throw .protocolViolation("the agent sent a line that is not a protocol reply")
        }
        guard version == WireProtocol.version else {
            throw .protocolViolation("the agent speaks protocol version \(version), this authctl speaks \(WireProtocol.version)")
        }
        let present = ["event", "error", "result"].filter { line[$0] != nil && line[$0] != .null }
        guard present.count == 1, let kind = present.first, let member = line[kind] else {
            throw .protocolViolation("the agent's reply does not have exactly one of event, error and result")
        }
        guard answers(id, id: replyID, isError: kind == "error") else {
            throw .protocolViolation(replyID.map { "the agent's \(kind) is for request \($0), not for request \(id)" }
                                     ?? "the agent's \(kind) does not carry the request's id")
        }
        do {
            switch kind {
            case "event": onEvent(try MiniJSONDecoder.decode(WireEvent.self, from: member)); return nil
            case "error": throw ClientError.agent(try MiniJSONDecoder.decode(WireError.self, from: member))
            default: return try MiniJSONDecoder.decode(R.self, from: member)
            }
        } catch let error as ClientError {
            throw error
        } catch {
            throw .protocolViolation("the agent's \(kind) does not match \(kind == "result" ? "\(R.self)" : "protocol version 1")")
        }
    }

    /// Whether a line carrying `replyID` (nil: no `id`) belongs to request `request`. The agent echoes a request's id
    /// in every line it sends for it; only an error may carry none, when the agent could not read the id (a malformed
    /// request, `message_too_large`, `permission_denied` to another uid or sender: docs/PROTOCOL.md, "Replies"). A
    /// line with another id answers another request.
    static func answers(_ request: Int, id replyID: Int?, isError: Bool) -> Bool {
        replyID == request || (replyID == nil && isError)
    }
}
