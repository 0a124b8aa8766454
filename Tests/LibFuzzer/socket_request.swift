// libFuzzer target: the socket request decoder (`WireRequest.decode(line:)`, AgentIPC), compiled with the AgentIPC
// wire sources only (no NIO), coverage-guided. Built and run by `scripts/fuzz --libfuzzer`; seeds in
// Tests/Fuzz/corpus/socket_request. The framing (ConnectionStateMachine) stays with the XCTest mutation fuzzer.
//
// Properties, checked on every input (a violation aborts, so libFuzzer saves the input as a crash):
// - a decoded request has `v == 1` and a known operation;
// - a refusal is `bad_request`, `unsupported_version` or `unknown_op`, and its reply encodes to one line of JSON
//   that decodes back with the same code and id (a hostile request can never inject a second reply line);
// - whatever the strict reader (MiniJSON) decodes as a request, `JSONDecoder` decodes as the same request, and the
//   request written again by authctl's writer (``WireRequest/line``) decodes to itself, and that line is what
//   `JSONEncoder` writes, read back.
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzSocketRequest(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let line = Array(UnsafeBufferPointer(start: data, count: size))
    switch WireRequest.decode(line: line) {
    case .request(let request):
        guard request.v == WireProtocol.version else { violated("decoded a request with v \(request.v)") }
        guard Operation(rawValue: request.op) != nil else { violated("decoded unknown op \(request.op.debugDescription)") }
        guard let codable = try? JSONDecoder().decode(WireRequest.self, from: Data(line)), codable == request else {
            violated("the strict reader read a request JSONDecoder reads differently")
        }
        guard case .request(let back) = WireRequest.decode(line: Array(request.line.utf8)), back == request else {
            violated("a decoded request does not survive authctl's writer and decoding again")
        }
        guard let codable = try? JSONEncoder().encode(request),
              (try? JSONDecoder().decode(WireRequest.self, from: codable)) == (try? JSONDecoder().decode(WireRequest.self, from: Data(request.line.utf8)))
        else { violated("authctl's writer and JSONEncoder write different requests") }
    case .invalid(let id, let error):
        guard let code = error.knownCode, [.badRequest, .unsupportedVersion, .unknownOp].contains(code) else {
            violated("refused with code \(error.code)")
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]  // as RequestDispatcher.encodeLine
        guard let reply = try? encoder.encode(WireResponse<NoResult>(id: id, error: error)) else {
            violated("the error reply does not encode")
        }
        guard !reply.contains(0x0A) else { violated("the error reply spans two lines") }
        guard let back = try? JSONDecoder().decode(WireResponse<NoResult>.self, from: reply),
              back.error?.code == error.code, back.id == id
        else { violated("the error reply does not decode back to the same code and id") }
    }
    return 0
}
