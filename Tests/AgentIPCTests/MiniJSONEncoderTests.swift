@testable import AgentIPC
import Foundation
import XCTest

/// The agent's reply writer on what the reply types do not show: every string escape, member order and replacement,
/// nesting, the integer range, and refusal of what the protocol has no room for. Each line is compared with
/// `JSONEncoder`'s (sorted keys, slashes unescaped), which wrote the replies before; the reply types themselves are
/// in MiniJSONDecoderTests.
final class MiniJSONEncoderTests: XCTestCase {
    private func assertSameAsFoundation<T: Encodable>(_ value: T, file: StaticString = #filePath, line: UInt = #line) throws {
        XCTAssertEqual(String(decoding: try MiniJSONEncoder.encode(value), as: UTF8.self),
                       try MiniJSONDecoderTests.foundation(value), file: file, line: line)
    }

    func testStringsAreEscapedAsJSONEncoderEscapesThem() throws {
        let every = String(decoding: (0..<0x80).map { UInt8($0) }, as: UTF8.self)
        try assertSameAsFoundation(["s": every + "é€😀\u{2028}/\\\""])
        XCTAssertEqual(String(decoding: try MiniJSONEncoder.encode("a\"b\\c\u{8}\u{c}\n\r\t\u{1}/"), as: UTF8.self),
                       #""a\"b\\c\b\f\n\r\t\u0001/""#)
        let parsed = try XCTUnwrap(MiniJSON.parse(try MiniJSONEncoder.encode([every])))
        XCTAssertEqual(parsed, .array([.string(every)]), "the strict reader reads back every character")
    }

    func testMembersAreSortedByTheirBytesAndTheLastOfAKeyWins() throws {
        try assertSameAsFoundation(["b": 1, "a": 2, "B": 3, "_": 4, "a_b": 5, "ab": 6, "é": 7, "z": 8])
        struct Twice: Encodable {
            enum Key: String, CodingKey { case a, b }
            func encode(to encoder: any Encoder) throws {
                var container = encoder.container(keyedBy: Key.self)
                try container.encode(1, forKey: .b)
                try container.encode("first", forKey: .a)
                try container.encode("second", forKey: .a)
            }
        }
        try assertSameAsFoundation(Twice())
        XCTAssertEqual(String(decoding: try MiniJSONEncoder.encode(Twice()), as: UTF8.self), #"{"a":"second","b":1}"#)
    }

    func testNestingNullsAndIntegers() throws {
        struct Nested: Encodable {
            enum Key: String, CodingKey { case inner, list, none, tuple }
            func encode(to encoder: any Encoder) throws {
                var container = encoder.container(keyedBy: Key.self)
                var inner = container.nestedContainer(keyedBy: Key.self, forKey: .inner)
                try inner.encodeNil(forKey: .none)
                var list = inner.nestedUnkeyedContainer(forKey: .list)
                try list.encode(Int8.min)
                try list.encode(UInt64.max)
                try list.encodeNil()
                var tuple = list.nestedContainer(keyedBy: Key.self)
                try tuple.encode(true, forKey: .tuple)
                try tuple.encodeIfPresent(String?.none, forKey: .none)
                var empty = container.nestedUnkeyedContainer(forKey: .list)
                _ = empty.nestedUnkeyedContainer()
            }
        }
        try assertSameAsFoundation(Nested())
        try assertSameAsFoundation([Int.min, Int.max, 0, -1])
        try assertSameAsFoundation([[String: [Int?]]](arrayLiteral: ["a": [1, nil], "b": []], [:]))
        try assertSameAsFoundation(WireResponse<NoResult>(id: nil, result: NoResult()))
    }

    /// The protocol has no fractional numbers (the client's reader refuses them too): the writer refuses them, naming
    /// where, and does not print the value.
    func testFractionalNumbersAreRefused() throws {
        XCTAssertThrowsError(try MiniJSONEncoder.encode(["expires_in": 1.5])) { error in
            guard case EncodingError.invalidValue(_, let context) = error else { return XCTFail("\(error)") }
            XCTAssertEqual(context.codingPath.map(\.stringValue), ["expires_in"])
            XCTAssertFalse(context.debugDescription.contains("1.5"))
        }
        XCTAssertThrowsError(try MiniJSONEncoder.encode([Float(1)]))
    }
}
