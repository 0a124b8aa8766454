extension WireRequest {
    /// One request line, decoded: a request with a supported version and a known operation, or the error to reply.
    public enum Decoded: Sendable {
        case request(WireRequest)
        case invalid(id: Int?, WireError)
    }

    /// Parses one request line (without its newline) with the protocol's one strict JSON reader (``MiniJSON``: UTF-8
    /// only, integers without fraction or exponent, no duplicate members, at most ``MiniJSON/maxMembers`` members
    /// in an object, nothing after the object). Malformed
    /// JSON, a missing or unknown version, unknown operations and members of the wrong type become errors that
    /// still carry the request's `id` when it could be read; unknown members are ignored, and `null` reads as
    /// absent. Pure, so it is fuzzed on its own both inside XCTest (Tests/FuzzTests) and under libFuzzer
    /// (Tests/LibFuzzer).
    public static func decode(line: [UInt8]) -> Decoded {
        guard let json = MiniJSON.parse(line), case .object = json,
              let v = json.int("v"), let id = json.int("id"), let op = json.string("op") else {
            return .invalid(id: nil, WireError(.badRequest, "the request is not a JSON object with integer 'v' and 'id' and string 'op'"))
        }
        guard let version = v else {
            return .invalid(id: id, WireError(.badRequest, "the request has no protocol version 'v'"))
        }
        guard version == WireProtocol.version else {
            return .invalid(id: id, WireError(.unsupportedVersion,
                "protocol version \(version) is not supported; this agent speaks version \(WireProtocol.version)"))
        }
        guard let op else { return .invalid(id: id, WireError(.badRequest, "the request has no 'op'")) }
        guard let operation = Operation(rawValue: op) else {
            return .invalid(id: id, WireError(.unknownOp,
                "unknown operation '\(String(op.prefix(64)))'; known: \(Operation.allCases.map(\.rawValue).joined(separator: ", "))"))
        }
        guard let request = WireRequest(operation, id: id, members: json) else {
            return .invalid(id: id, WireError(.badRequest, "a field of the '\(op)' request has the wrong type"))
        }
        return .request(request)
    }

    /// ``decode(line:)`` for bytes in someone else's buffer.
    public static func decode(bytes: UnsafeRawBufferPointer) -> Decoded { decode(line: Array(bytes)) }

    /// The request's optional members (``members``) from `json`; nil when one has the wrong type. `method` is kept as
    /// sent: an unknown method is the operation's error to report, with the list of known ones. Each member the line
    /// has is looked up (``memberIndex``), not each member the protocol knows: a request costs the accept loop what
    /// it sends, however many members later versions add.
    private init?(_ operation: Operation, id: Int?, members json: MiniJSON) {
        self.init(op: operation, id: id)
        guard case .object(let entries) = json else { return nil }
        for (name, value) in entries {
            guard let kind = WireRequest.memberIndex[name] else { continue }  // v, id, op, and members unknown here
            switch kind {
            case .string(let slot): guard let value = value.asString else { return nil }; slot(&self) { $0 = value }
            case .int(let slot): guard let value = value.asInt else { return nil }; slot(&self) { $0 = value }
            case .bool(let slot): guard let value = value.asBool else { return nil }; slot(&self) { $0 = value }
            case .strings(let slot): guard let value = value.asStrings else { return nil }; slot(&self) { $0 = value }
            }
        }
    }

    /// ``members`` by wire name, for the reader (the agent's; authctl only writes requests).
    static let memberIndex: [String: Member] = Dictionary(uniqueKeysWithValues: members.map { ($0.name, $0.kind) })
}
