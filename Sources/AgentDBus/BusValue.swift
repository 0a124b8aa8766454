#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// A D-Bus value of the few shapes the agent's interface uses. Results are maps from the socket protocol's field
/// names to variants (`a{sv}`), made from the same Codable result types the socket encodes, so both front ends
/// report the same fields under the same names.
public indirect enum BusValue: Sendable, Equatable {
    case string(String)
    case bool(Bool)
    case int64(Int64)
    case double(Double)
    case stringArray([String])
    /// `a{sv}`, written with its keys sorted.
    case dict([String: BusValue])
    /// `aa{sv}`.
    case dictArray([[String: BusValue]])

    /// The D-Bus type signature.
    public var signature: String {
        switch self {
        case .string: return "s"
        case .bool: return "b"
        case .int64: return "x"
        case .double: return "d"
        case .stringArray: return "as"
        case .dict: return "a{sv}"
        case .dictArray: return "aa{sv}"
        }
    }

    /// `value`'s JSON encoding (the socket protocol's field names) as an `a{sv}` map: strings `s`, booleans `b`,
    /// integers `x`, other numbers `d`, objects `a{sv}`, arrays of strings (or empty ones) `as`, arrays of objects
    /// `aa{sv}`. Null (an unknown optional field) is left out, as the socket leaves it out.
    public static func dictionary<T: Encodable>(encoding value: T) -> [String: BusValue] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        guard let data = try? encoder.encode(value), let json = try? JSONDecoder().decode(JSONValue.self, from: data),
              case .object(let fields) = json else { return [:] }
        return dictionary(fields)
    }

    static func dictionary(_ fields: [String: JSONValue]) -> [String: BusValue] {
        fields.compactMapValues(BusValue.init(json:))
    }

    init?(json: JSONValue) {
        switch json {
        case .null: return nil
        case .bool(let value): self = .bool(value)
        case .int(let value): self = .int64(value)
        case .double(let value): self = .double(value)
        case .string(let value): self = .string(value)
        case .object(let fields): self = .dict(BusValue.dictionary(fields))
        case .array(let items):
            let strings = items.compactMap { item -> String? in if case .string(let s) = item { return s } else { return nil } }
            if strings.count == items.count { self = .stringArray(strings); return }
            let objects = items.compactMap { item -> [String: JSONValue]? in if case .object(let o) = item { return o } else { return nil } }
            guard objects.count == items.count else { return nil }
            self = .dictArray(objects.map { BusValue.dictionary($0) })
        }
    }
}

/// A decoded JSON document, to walk the socket protocol's encoding of a result.
enum JSONValue: Decodable, Equatable {
    case null
    case bool(Bool)
    case int(Int64)
    case double(Double)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])

    init(from decoder: any Decoder) throws {
        if let container = try? decoder.singleValueContainer() {
            if container.decodeNil() { self = .null; return }
            if let value = try? container.decode(Bool.self) { self = .bool(value); return }
            if let value = try? container.decode(Int64.self) { self = .int(value); return }
            if let value = try? container.decode(Double.self) { self = .double(value); return }
            if let value = try? container.decode(String.self) { self = .string(value); return }
            if let value = try? container.decode([JSONValue].self) { self = .array(value); return }
        }
        self = .object(try decoder.singleValueContainer().decode([String: JSONValue].self))
    }
}
