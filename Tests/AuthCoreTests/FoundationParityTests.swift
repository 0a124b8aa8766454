@testable import AuthCore
import Foundation
import XCTest

/// The agent links FoundationEssentials only, so what it took from full Foundation (CharacterSet trimming, percent
/// decoding, JSONSerialization) is small Swift code in AuthCore. The tests link full Foundation: each piece is
/// checked against the Foundation call it replaced, on tricky and on random input.
final class FoundationParityTests: XCTestCase {
    /// Spaces of every kind, line breaks, controls, combining marks, non-ASCII text.
    static let pieces = [" ", "\t", "\n", "\r", "\r\n", "\u{0B}", "\u{0C}", "\u{85}", "\u{A0}", "\u{1680}", "\u{2003}",
                         "\u{2028}", "\u{2029}", "\u{202F}", "\u{205F}", "\u{3000}", "\u{200B}", "\u{FEFF}", "\u{301}",
                         "a", "Z", "0", "é", "e\u{301}", "日本", "🙂", "%", "%2", "%20", "%zz", "%C3%A9", "%FF", "%e2%82%ac",
                         "+", "=", "&", "-", ".", "_", "~", "/", "?", "#", "\u{0}"]

    func randomStrings(count: Int = 2000) -> [String] {
        var generator = SplitMix(seed: 19)
        var result = Self.pieces
        for _ in 0..<count {
            let length = Int.random(in: 0...8, using: &generator)
            result.append((0..<length).map { _ in Self.pieces.randomElement(using: &generator)! }.joined())
        }
        return result
    }

    func testTrimmingMatchesCharacterSets() {
        for text in randomStrings() {
            XCTAssertEqual(text.trimmingBlanks, text.trimmingCharacters(in: .whitespaces), "\(Array(text.unicodeScalars))")
            XCTAssertEqual(text.trimmingWhitespace, text.trimmingCharacters(in: .whitespacesAndNewlines),
                           "\(Array(text.unicodeScalars))")
        }
    }

    func testPercentDecodingMatchesFoundation() {
        for text in randomStrings() {
            XCTAssertEqual(LoginSession.percentDecoded(text), text.removingPercentEncoding, "\(Array(text.unicodeScalars))")
        }
    }

    func testFormEncodingMatchesCharacterSetVersion() {
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._~")
        for text in randomStrings() {
            let old = text.unicodeScalars.map { scalar -> String in
                if scalar.isASCII, allowed.contains(scalar) { return String(scalar) }
                return String(scalar).utf8.map { String(format: "%%%02X", $0) }.joined()
            }.joined()
            XCTAssertEqual(LoginSession.formEncode(text), old)
        }
    }

    func testBase64URLMatchesFoundationVersion() {
        var generator = SplitMix(seed: 7)
        for length in 0..<200 {
            let bytes = (0..<length).map { _ in UInt8.random(in: 0...255, using: &generator) }
            let old = Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-")
                .replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
            XCTAssertEqual(Base64URL.encode(bytes), old)
            XCTAssertEqual(Base64URL.decode(old).map(Array.init), bytes)
        }
        XCTAssertNil(Base64URL.decode("a"))
        XCTAssertNil(Base64URL.decode("ab$d"))
    }

    /// Reading a field through ``JSONValue`` gives what `JSONSerialization` with `as?` gave, for every type a
    /// provider might put there.
    func testJSONValueReadsFieldsAsJSONSerializationDid() throws {
        let documents = [
            #"{"s": "text", "n": 1700000000, "f": 1.5, "neg": -2, "t": true, "z": false, "null": null, "a": ["x", "y"], "mixed": ["x", 1], "empty": [], "o": {"s": "inner"}}"#,
            #"{"s": 3, "n": "1700000000", "f": null, "t": "true", "a": "x", "o": [1]}"#,
            #"{"s": "\u00e9\ud83d\ude42\n", "n": 1e3, "f": 12345678901234567890, "a": [[]], "t": 1, "z": 0}"#,
            #"{}"#,
        ]
        for document in documents {
            let new = try XCTUnwrap(JSONValue.object(Array(document.utf8)), document)
            let old = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(document.utf8)) as? [String: Any])
            for key in ["s", "n", "f", "neg", "t", "z", "null", "a", "mixed", "empty", "o", "absent"] {
                XCTAssertEqual(new[key]?.string, old[key] as? String, "\(document) \(key)")
                XCTAssertEqual(new[key]?.strings, old[key] as? [String], "\(document) \(key)")
                XCTAssertEqual(new[key] != nil, old[key] != nil, "\(document) \(key)")
                // Numbers: JSONSerialization's NSNumber; JSON booleans are NSNumbers there, never numbers here.
                if case .bool? = new[key] { continue }
                XCTAssertEqual(new[key]?.number, (old[key] as? NSNumber)?.doubleValue, "\(document) \(key)")
            }
        }
        // Booleans: JSON's true and false only. (JSONSerialization's `as? Bool` also read the number 1 as true.)
        let booleans = try XCTUnwrap(JSONValue.object(Array(documents[0].utf8)))
        XCTAssertEqual(booleans["t"]?.bool, true)
        XCTAssertEqual(booleans["z"]?.bool, false)
        XCTAssertNil(booleans["s"]?.bool)
        XCTAssertNil(try JSONValue.object(Array(documents[2].utf8))?["t"]?.bool)
        for notObject in ["[]", "\"text\"", "1", "", "{", "{\"a\" 1}", "nul", "{\"a\": 1} x"] {
            XCTAssertNil(try JSONValue.object(Array(notObject.utf8)), notObject)
            XCTAssertNil((try? JSONSerialization.jsonObject(with: Data(notObject.utf8))) as? [String: Any], notObject)
        }
        // Both parsers are swift-foundation's: they agree on the odd cases too.
        for odd in ["{\"a\": 1,}", "\u{FEFF}{\"a\": 1}", "{\"a\": 1e400}", "{\"a\": \"\\ud800\"}"] {
            let new = try JSONValue.object(Array(odd.utf8))
            let old = (try? JSONSerialization.jsonObject(with: Data(odd.utf8))) as? [String: Any]
            XCTAssertEqual(new == nil, old == nil, odd)
            XCTAssertEqual(new?["a"]?.string, old?["a"] as? String, odd)
        }
        // The one difference: of a duplicated member JSONDecoder keeps the first, JSONSerialization kept the last.
        // JSONValue reads neither: it refuses the document (DuplicateMemberTests).
        XCTAssertThrowsError(try JSONValue.object(Array(#"{"a": "first", "a": "last"}"#.utf8)))
    }
}

/// A seeded generator, so a failure names input that can be reproduced.
struct SplitMix: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
