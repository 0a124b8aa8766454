#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

extension WireRequest {
    /// One request line, decoded: a request with a supported version and a known operation, or the error to reply.
    public enum Decoded: Sendable {
        case request(WireRequest)
        case invalid(id: Int?, WireError)
    }

    /// Parses one request line (without its newline). Malformed JSON, a missing or unknown version and unknown
    /// operations become errors that still carry the request's `id` when it could be read. Pure and free of NIO, so
    /// it is fuzzed on its own both inside XCTest (Tests/FuzzTests) and under libFuzzer (Tests/LibFuzzer).
    /// A plain `token` request is read in place by ``TokenRequestScanner``; any other line is parsed once by
    /// `JSONDecoder`: the envelope (`v`, `id`, `op`) and the request's fields from the same parsed value.
    public static func decode(line: [UInt8]) -> Decoded {
        if let request = line.withUnsafeBytes(TokenRequestScanner.scan) { return .request(request) }
        return decodeWithJSONDecoder(line: line)
    }

    /// ``decode(line:)`` for bytes in someone else's buffer (the socket's read buffer): copied only when the
    /// scanner cannot read them.
    public static func decode(bytes: UnsafeRawBufferPointer) -> Decoded {
        if let request = TokenRequestScanner.scan(bytes) { return .request(request) }
        return decodeWithJSONDecoder(line: Array(bytes))
    }

    /// The full decoder, without the scanner's shortcut (the fuzz tests' oracle for the scanner).
    static func decodeWithJSONDecoder(line: [UInt8]) -> Decoded {
        guard let envelope = try? requestDecoder.decode(Envelope.self, from: Data(line)) else {
            return .invalid(id: nil, WireError(.badRequest, "the request is not a JSON object with integer 'v' and 'id' and string 'op'"))
        }
        guard let version = envelope.v else {
            return .invalid(id: envelope.id, WireError(.badRequest, "the request has no protocol version 'v'"))
        }
        guard version == WireProtocol.version else {
            return .invalid(id: envelope.id, WireError(.unsupportedVersion,
                "protocol version \(version) is not supported; this agent speaks version \(WireProtocol.version)"))
        }
        guard let op = envelope.op else { return .invalid(id: envelope.id, WireError(.badRequest, "the request has no 'op'")) }
        guard Operation(rawValue: op) != nil else {
            return .invalid(id: envelope.id, WireError(.unknownOp,
                "unknown operation '\(String(op.prefix(64)))'; known: \(Operation.allCases.map(\.rawValue).joined(separator: ", "))"))
        }
        guard let request = envelope.request else {
            return .invalid(id: envelope.id, WireError(.badRequest, "a field of the '\(op)' request has the wrong type"))
        }
        return .request(request)
    }

    /// Shared: it has no per-request options, and JSONDecoder may be used from several threads at once.
    private static let requestDecoder = JSONDecoder()

    /// A request line read in one pass: the envelope must decode (an object with integer `v`/`id` and string `op`
    /// when present, else the line is not a request at all); the full ``WireRequest`` is nil when another field
    /// has the wrong type (or `v`/`op` is missing), which ``decode(line:)`` reports after the envelope's own checks.
    struct Envelope: Decodable {
        var v: Int?
        var id: Int?
        var op: String?
        var request: WireRequest?

        enum Keys: String, CodingKey { case v, id, op }

        init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: Keys.self)
            v = try container.decodeIfPresent(Int.self, forKey: .v)
            id = try container.decodeIfPresent(Int.self, forKey: .id)
            op = try container.decodeIfPresent(String.self, forKey: .op)
            request = try? WireRequest(from: decoder)
        }
    }
}
