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
    public static func decode(line: [UInt8]) -> Decoded {
        struct Probe: Decodable { var v: Int?; var id: Int?; var op: String? }
        let decoder = JSONDecoder()
        guard let probe = try? decoder.decode(Probe.self, from: Data(line)) else {
            return .invalid(id: nil, WireError(.badRequest, "the request is not a JSON object with integer 'v' and 'id' and string 'op'"))
        }
        guard let version = probe.v else {
            return .invalid(id: probe.id, WireError(.badRequest, "the request has no protocol version 'v'"))
        }
        guard version == WireProtocol.version else {
            return .invalid(id: probe.id, WireError(.unsupportedVersion,
                "protocol version \(version) is not supported; this agent speaks version \(WireProtocol.version)"))
        }
        guard let op = probe.op else { return .invalid(id: probe.id, WireError(.badRequest, "the request has no 'op'")) }
        guard Operation(rawValue: op) != nil else {
            return .invalid(id: probe.id, WireError(.unknownOp,
                "unknown operation '\(String(op.prefix(64)))'; known: \(Operation.allCases.map(\.rawValue).joined(separator: ", "))"))
        }
        do {
            return .request(try decoder.decode(WireRequest.self, from: Data(line)))
        } catch {
            return .invalid(id: probe.id, WireError(.badRequest, "a field of the '\(op)' request has the wrong type"))
        }
    }
}
