@testable import AgentIPC
@testable import AgentServer
@testable import AgentAccess
import Foundation
import XCTest

/// The socket request decoder under mutation fuzzing: bytes → the connection's ``ConnectionStateMachine`` (fed in
/// uneven chunks, as the accept loop's reads give them, then the end of input) → `RequestDispatcher.decode` → the
/// error reply line.
///
/// Properties, checked on every input: the lines that come out are exactly the input's newline-separated lines
/// (one trailing CR removed), in order, none longer than the cap; a line over the cap stops the connection with
/// `tooLong` at exactly that line and nothing after it is delivered; a decoded request always has `v == 1` and
/// a known operation; every refusal is `bad_request`, `unsupported_version` or `unknown_op`, and its reply encodes
/// to one line of valid JSON (so a hostile request can never inject a second reply line).
final class SocketRequestFuzzTests: XCTestCase {
    static let cap = 512  // small, so the over-the-cap path is exercised as often as the normal one

    func testSocketRequestDecoder() {
        let engine = FuzzEngine(target: "socket_request", dictionary: [
            #"{"v":1,"id":1,"op":"token","account":"work"}"#, #""v":"#, #""op":"#, #""id":"#, #""account":"#,
            #""min_valid":"#, #""force_refresh":true"#, "ping", "status", "token", "login", "login_callback", "logout",
            "frobnicate", #""op":"token""#, #""min_valid":30"#, #""account":"w\u006frk""#, " ", "\t", "1e2", "-0", "null",
            #""v":2"#, #""id":-9223372036854775808"#, #""id":9223372036854775808"#, #""url":"http://127.0.0.1/"#,
        ], maxLength: 2048)
        let report = engine.run { input in SocketRequestFuzzTests.check(input) }
        XCTAssertGreaterThan(report.inputs, 0)
        XCTAssertEqual(report.failures, 0)
    }

    static func check(_ input: [UInt8]) -> String? {
        // The input decides how it is cut into chunks, so a failing input replays exactly.
        var chunkSeed = SplitMix64(seed: UInt64(input.count) &* 31 &+ UInt64(input.first ?? 7))
        var machine = ConnectionStateMachine(maxLine: cap, maxInFlight: 1, outputLimit: 0)
        var lines: [[UInt8]] = []
        var tooLong = false
        func drain() {
            while true {
                switch machine.nextLine() {
                case .none: return
                case .tooLong: tooLong = true
                case .line(let line): lines.append(Array(line))
                }
            }
        }
        var rest = input[...]
        while !rest.isEmpty {
            let n = 1 + chunkSeed.next(min(rest.count, 97))
            Array(rest.prefix(n)).withUnsafeBytes { machine.received($0) }
            rest = rest.dropFirst(n)
            drain()
        }
        machine.inputEnded()
        drain()
        guard machine.isFinished else { return "not finished after every line was served" }

        // The oracle: split by hand.
        var expected: [[UInt8]] = []
        var expectTooLong = false
        let segments = input.split(separator: 0x0A, omittingEmptySubsequences: false).map(Array.init)
        for (index, segment) in segments.enumerated() {
            let complete = index < segments.count - 1
            if segment.count > cap { expectTooLong = true; break }
            if complete {
                expected.append(segment.last == 0x0D ? Array(segment.dropLast()) : segment)
            } else if !segment.isEmpty {
                expected.append(segment.last == 0x0D ? Array(segment.dropLast()) : segment)
            }
        }
        guard tooLong == expectTooLong else { return "LineTooLong \(tooLong), expected \(expectTooLong)" }
        guard lines == expected else { return "framed \(lines.count) lines, expected \(expected.count) (or different bytes)" }

        for line in lines {
            guard line.count <= cap, !line.contains(0x0A) else { return "a framed line breaks the cap or holds a newline" }
            if let difference = SocketRequestFuzzTests.compareWithTwoPassDecoder(line) { return difference }
            switch WireRequest.decode(line: line) {
            case .request(let request):
                guard request.v == WireProtocol.version, Operation(rawValue: request.op) != nil else {
                    return "decoded a request with v \(request.v) op \(request.op)"
                }
            case .invalid(let id, let error):
                guard [.badRequest, .unsupportedVersion, .unknownOp].contains(error.knownCode) else {
                    return "refused with code \(error.code)"
                }
                let reply = RequestDispatcher.encodeLine(WireResponse<NoResult>(id: id, error: error))
                guard !reply.contains(0x0A),
                      let object = try? JSONSerialization.jsonObject(with: Data(reply)) as? [String: Any],
                      (object["error"] as? [String: Any])?["code"] as? String == error.code
                else { return "the error reply is not one line of JSON" }
            }
        }
        return nil
    }

    /// Lines near the `token` request's shape (key order, spacing, escapes, numbers at the edges, extra or repeated
    /// keys, other types, non-ASCII), generated from a seed: the strict reader decides as `JSONDecoder` does on every
    /// line that is JSON it reads, and reads every plain one as a request (so the comparison is not vacuous).
    func testTheStrictReaderAgreesWithJSONDecoderNearTheTokenShape() {
        var random = SplitMix64(seed: UInt64(ProcessInfo.processInfo.environment["FUZZ_SEED"] ?? "") ?? 0x5CA9)
        let numbers = ["0", "1", "-1", "30", "-0", "00", "01", "1.0", "1e2", "1E2", "2", "9223372036854775807",
                       "-9223372036854775808", "9223372036854775808", "-9223372036854775809", "\"1\"", "null", "true", "[]"]
        let strings = [#""work""#, #""token""#, #""""#, #""w\u006frk""#, #""w\"rk""#, #""wörk""#, #""a b/c~""#, #""\t""#,
                       "\"\u{7f}\"", #""to\u006ben""#, "\"tab\there\"", "1", "null", #""ping""#, #""status""#]
        let keys = ["v", "id", "op", "account", "min_valid", "force_refresh", "scopes", "V", "op ", #"\u0076"#, "account"]
        let spaces = ["", "", "", " ", "\t", "\r\n", "  "]
        var scannedCount = 0
        var failures: [String] = []
        for round in 0..<20_000 {
            var members: [String] = []
            let plain = round % 3 == 0
            if plain {
                members = [#""v":1"#, #""id":\#(random.next(1000))"#, #""op":"token""#, #""account":"acc-\#(random.next(9))""#]
                if random.next(2) == 0 { members.append(#""min_valid":\#(random.next(4000))"#) }
                members.shuffle(using: &random)
            } else {
                for _ in 0..<(1 + random.next(7)) {
                    let key = keys[random.next(keys.count)]
                    let value = random.next(2) == 0 ? numbers[random.next(numbers.count)] : strings[random.next(strings.count)]
                    members.append("\"\(key)\"" + spaces[random.next(spaces.count)] + ":" + spaces[random.next(spaces.count)] + value)
                }
                if random.next(2) == 0 { members.append(#""v":1"#) }
                if random.next(2) == 0 { members.append(#""op":"token""#) }
                members.shuffle(using: &random)
            }
            let gap = { spaces[random.next(spaces.count)] }
            var line = gap() + "{" + gap() + members.joined(separator: gap() + "," + gap()) + gap() + "}" + gap()
            if !plain, random.next(10) == 0 { line += ["x", "}", ",", "{}"][random.next(4)] }
            let bytes = Array(line.utf8)
            let read: Bool
            if case .request = WireRequest.decode(line: bytes) { read = true } else { read = false }
            if read { scannedCount += 1 }
            if plain, !read { failures.append("not read: \(line)") }
            if let difference = SocketRequestFuzzTests.compareWithTwoPassDecoder(bytes) { failures.append("\(difference): \(line)") }
        }
        XCTAssertEqual(failures.prefix(5), [])
        XCTAssertGreaterThan(scannedCount, 6_000)
    }

    /// The strict reader must decide exactly as Codable does (a probe of `v`/`id`/`op`, then the whole
    /// `WireRequest`, both with `JSONDecoder`), kept here as the oracle, on every line that is JSON the strict reader
    /// reads; anything else (fractions, exponents, duplicate members, objects over 128 members, numbers beyond Int,
    /// invalid UTF-8, trailing bytes) is refused as not a request.
    static func compareWithTwoPassDecoder(_ line: [UInt8]) -> String? {
        struct Probe: Decodable { var v: Int?; var id: Int?; var op: String? }
        let expected: (request: WireRequest?, id: Int?, code: String?)
        if MiniJSON.parse(line) == nil {
            expected = (nil, nil, ErrorCode.badRequest.rawValue)
        } else if let probe = try? JSONDecoder().decode(Probe.self, from: Data(line)) {
            if probe.v == nil {
                expected = (nil, probe.id, ErrorCode.badRequest.rawValue)
            } else if probe.v != WireProtocol.version {
                expected = (nil, probe.id, ErrorCode.unsupportedVersion.rawValue)
            } else if probe.op == nil {
                expected = (nil, probe.id, ErrorCode.badRequest.rawValue)
            } else if Operation(rawValue: probe.op!) == nil {
                expected = (nil, probe.id, ErrorCode.unknownOp.rawValue)
            } else if let request = try? JSONDecoder().decode(WireRequest.self, from: Data(line)) {
                expected = (request, nil, nil)
            } else {
                expected = (nil, probe.id, ErrorCode.badRequest.rawValue)
            }
        } else {
            expected = (nil, nil, ErrorCode.badRequest.rawValue)
        }
        switch WireRequest.decode(line: line) {
        case .request(let request):
            return request == expected.request ? nil : "decoded a request Codable did not, or differently"
        case .invalid(let id, let error):
            return expected.request == nil && id == expected.id && error.code == expected.code
                ? nil : "refused differently from Codable (\(error.code), id \(String(describing: id)))"
        }
    }
}

extension SplitMix64: RandomNumberGenerator {
    mutating func next() -> UInt64 { nextUInt64() }
}
