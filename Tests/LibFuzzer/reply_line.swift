// libFuzzer target: the client's reading of one reply line (AgentIPC), compiled with the pure reading sources only (no
// sockets): ``ReplyReader`` (MiniJSON, the envelope rule, the id match, MiniJSONDecoder into the reply types), authctl's
// one reply reader. Built and run by `scripts/libfuzz`;
// seeds in Tests/Fuzz/corpus/reply_line. The line answers request 1 (a client's first request).
//
// Properties, checked on every input (a violation aborts, so libFuzzer saves the input as a crash):
// - a result or an event is taken only from a line whose `id` is 1, an error only from one whose `id` is 1 or absent;
// - the envelope does not depend on the result type asked for: a line read as an event or an error when a
//   TokenResult is expected reads the same when any other reply type is.
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif

let request = 1

enum Outcome<R: Equatable>: Equatable {
    case event(WireEvent), error(WireError), result(R), refused
}

func read<R: Decodable & Equatable>(_ line: [UInt8], as type: R.Type) -> Outcome<R> {
    var event: WireEvent?
    do {
        guard let result = try ReplyReader.read(line, as: type, request: request, onEvent: { event = $0 }) else {
            guard let event else { violated("neither a result nor an event") }
            return .event(event)
        }
        guard event == nil else { violated("a result and an event from one line") }
        return .result(result)
    } catch {
        switch error {
        case .agent(let wire): return .error(wire)
        case .protocolViolation: return .refused
        default: violated("a reply line read as \(error)")
        }
    }
}

/// The same envelope outcome as `token`'s, for a line read as another reply type.
func assertSameEnvelope<R: Decodable & Equatable>(_ line: [UInt8], _ token: Outcome<TokenResult>, as type: R.Type) {
    switch (token, read(line, as: type)) {
    case (.event(let a), .event(let b)) where a == b: break
    case (.error(let a), .error(let b)) where a == b: break
    case (.result, .result), (.result, .refused), (.refused, .result), (.refused, .refused): break
    default: violated("the line reads otherwise as \(R.self) than as TokenResult")
    }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzReplyLine(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let line = Array(UnsafeBufferPointer(start: data, count: size))
    let full = read(line, as: TokenResult.self)
    let id = MiniJSON.parse(line)?["id"]
    switch full {
    case .result, .event: guard id == .integer(request) else { violated("a result or an event taken from a line without the request's id") }
    case .error: guard id == .integer(request) || id == nil || id == .null else { violated("an error taken from a line for another request") }
    case .refused: break
    }
    assertSameEnvelope(line, full, as: StatusResult.self)
    assertSameEnvelope(line, full, as: LoginResult.self)
    assertSameEnvelope(line, full, as: AuditResult.self)
    assertSameEnvelope(line, full, as: DiagnoseResult.self)
    return 0
}
