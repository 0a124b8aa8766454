@testable import AgentIPC
import Foundation
import XCTest

/// The client's reply reader against `JSONDecoder` (what it used before) on lines near the `token` reply's shape,
/// generated from a seed: on every line the strict ``MiniJSON`` parses, ``ReplyReader`` decides as `JSONDecoder`
/// does under the documented envelope rules (version 1, an integer `id` or none, exactly one of `event`, `error`,
/// `result`; the request's `id` on an event or a result, on an error that or none). The lines answer request 1.
final class ReplyReaderFuzzTests: XCTestCase {
    enum Outcome: Equatable {
        case event(WireEvent), error(WireError), result(TokenResult), refused
    }

    func testTheReplyReaderAgreesWithJSONDecoderNearTheTokenShape() {
        var random = SplitMix64(seed: UInt64(ProcessInfo.processInfo.environment["FUZZ_SEED"] ?? "") ?? 0x2E9_1)
        let values = ["0", "1", "-1", "60", "00", "1.0", "1e2", "9223372036854775807", "9223372036854775808", "true", "false",
                      "null", "[]", #"["a"]"#, #"["a",1]"#, "{}", #""""#, #""Bearer""#, #""t\u006fk""#, #""é""#, "\"\u{7f}\""]
        let resultKeys = ["account", "access_token", "token_type", "expires_in", "expires_at", "does_not_expire", "scopes",
                          "id_token", "extra", "account"]
        let envelopeKeys = ["v", "id", "result", "error", "event", "V"]
        func object(_ members: [String]) -> String { "{" + members.shuffled(using: &random).joined(separator: ",") + "}" }
        func value() -> String { values[random.next(values.count)] }
        var results = 0
        var failures: [String] = []
        for round in 0..<20_000 {
            var result = [#""account":"w""#, #""access_token":"T""#, #""token_type":"Bearer""#]
            if random.next(4) == 0 { result.append(#""does_not_expire":true"#) } else { result += [#""expires_in":60"#, #""expires_at":99"#] }
            for _ in 0..<random.next(round % 2 == 0 ? 1 : 4) {
                let key = resultKeys[random.next(resultKeys.count)]
                if let index = result.firstIndex(where: { $0.hasPrefix("\"\(key)\"") }), random.next(2) == 0 { result.remove(at: index) }
                result.append("\"\(key)\":\(value())")
            }
            var envelope = [#""v":1"#]
            switch random.next(8) {
            case 0: break
            case 1: envelope.append(#""id":\#(random.next(9))"#)
            default: envelope.append(#""id":1"#)
            }
            switch random.next(10) {
            case 0: envelope.append(#""error":{"code":"c","message":"m","retry_after":\#(value())}"#)
            case 1: envelope.append(#""event":{"type":"login_started","timeout_s":\#(value())}"#)
            default: envelope.append(#""result":\#(object(result))"#)
            }
            if round % 3 == 0 { envelope.append("\"\(envelopeKeys[random.next(envelopeKeys.count)])\":\(value())") }
            let line = Array(object(envelope).utf8)
            let outcome = ReplyReaderFuzzTests.client(line)
            if case .result = outcome { results += 1 }
            if MiniJSON.parse(line) != nil, outcome != ReplyReaderFuzzTests.oracle(line) {
                failures.append("the client and JSONDecoder differ: \(String(decoding: line, as: UTF8.self))")
            }
        }
        XCTAssertEqual(failures.prefix(5), [])
        XCTAssertGreaterThan(results, 5_000, "most lines are results, so the comparison is not vacuous")
    }

    static func client(_ line: [UInt8]) -> Outcome {
        var event: WireEvent?
        do {
            guard let result = try ReplyReader.read(line, as: TokenResult.self, request: 1, onEvent: { event = $0 }) else {
                return event.map(Outcome.event) ?? .refused
            }
            return .result(result)
        } catch {
            if case .agent(let error) = error { return .error(error) }
            return .refused
        }
    }

    static func oracle(_ line: [UInt8]) -> Outcome {
        /// Present when the member is there and not null, whatever it holds.
        struct Present: Decodable { init(from decoder: any Decoder) {} }
        struct Probe: Decodable { var v: Int; var id: Int?; var event: Present?; var error: Present?; var result: Present? }
        let data = Data(line)
        guard let probe = try? JSONDecoder().decode(Probe.self, from: data), probe.v == WireProtocol.version,
              probe.id == 1 || (probe.id == nil && probe.error != nil) else { return .refused }
        func member<R: Decodable>(_ type: R.Type, _ pick: (WireResponse<R>) -> Outcome?) -> Outcome {
            (try? JSONDecoder().decode(WireResponse<R>.self, from: data)).flatMap(pick) ?? .refused
        }
        switch (probe.event != nil, probe.error != nil, probe.result != nil) {
        case (true, false, false): return member(NoResult.self) { $0.event.map(Outcome.event) }
        case (false, true, false): return member(NoResult.self) { $0.error.map(Outcome.error) }
        case (false, false, true): return member(TokenResult.self) { $0.result.map(Outcome.result) }
        default: return .refused
        }
    }
}
