import FoundationEssentials

/// A JSON document read with `JSONDecoder` when the fields a caller wants may be absent or of any type: the
/// provider's discovery document, JWKS, ID token header and claims, and error replies. A field of another type than
/// the one asked for reads as nil, as an unexpected field would, instead of failing the whole document (what a
/// Codable struct would do). Numbers are read as `Double` (`exp` and `iat` may be fractional: RFC 7519 §2).
///
/// Every document from a provider is read through ``object(_:)`` or ``decode(_:from:)``, which refuse an object that
/// names a member twice (``DuplicateJSONMember``): parsers disagree on which value counts.
public enum JSONValue: Sendable, Equatable, Decodable {
    case object([String: JSONValue])
    case array([JSONValue])
    case string(String)
    case number(Double)
    case bool(Bool)
    case null

    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() {
            self = .null
        } else if let value = try? container.decode(Bool.self) {
            self = .bool(value)
        } else if let value = try? container.decode(Double.self) {
            self = .number(value)
        } else if let value = try? container.decode(String.self) {
            self = .string(value)
        } else if let value = try? container.decode([JSONValue].self) {
            self = .array(value)
        } else {
            self = .object(try container.decode([String: JSONValue].self))
        }
    }

    /// The document in `bytes` if it is a JSON object; nil for anything else (not JSON, an array, a string).
    /// - Throws: ``DuplicateJSONMember`` when an object in it, at any depth, names a member twice.
    public static func object(_ bytes: some Sequence<UInt8>) throws(DuplicateJSONMember) -> [String: JSONValue]? {
        let bytes = Array(bytes)
        if let duplicate = JSONDuplicateScan.firstDuplicate(in: bytes) { throw duplicate }
        guard case .object(let members)? = try? JSONDecoder().decode(JSONValue.self, from: Data(bytes)) else { return nil }
        return members
    }

    /// `T` decoded from `bytes` by JSONDecoder, once no object in them names a member twice.
    /// - Throws: ``DuplicateJSONMember``, or what decoding `T` throws.
    public static func decode<T: Decodable>(_ type: T.Type, from bytes: some Sequence<UInt8>) throws -> T {
        let bytes = Array(bytes)
        if let duplicate = JSONDuplicateScan.firstDuplicate(in: bytes) { throw duplicate }
        return try JSONDecoder().decode(type, from: Data(bytes))
    }

    public var string: String? {
        if case .string(let value) = self { return value }
        return nil
    }

    public var number: Double? {
        if case .number(let value) = self { return value }
        return nil
    }

    public var bool: Bool? {
        if case .bool(let value) = self { return value }
        return nil
    }

    public var object: [String: JSONValue]? {
        if case .object(let value) = self { return value }
        return nil
    }

    public var array: [JSONValue]? {
        if case .array(let value) = self { return value }
        return nil
    }

    /// An array whose every element is a string; nil otherwise.
    public var strings: [String]? {
        guard case .array(let values) = self else { return nil }
        var result: [String] = []
        for value in values {
            guard case .string(let text) = value else { return nil }
            result.append(text)
        }
        return result
    }
}
