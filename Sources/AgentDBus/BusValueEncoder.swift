/// Encodes the socket protocol's Codable result types straight into ``BusValue``s, under the same field names
/// (their `CodingKeys`), so both front ends report the same fields without a JSON round trip. Strings are `s`,
/// booleans `b`, integers `x`, other numbers `d`, structures `a{sv}`, arrays of strings (or empty ones) `as`, arrays
/// of structures `aa{sv}`; nil (an unknown optional field) is left out, as the socket leaves it out.
enum BusValueEncoder {
    /// `value` as an `a{sv}` map (empty if it is not a structure).
    static func dictionary<T: Encodable>(_ value: T) -> [String: BusValue] {
        let root = Node()
        try? value.encode(to: NodeEncoder(node: root, codingPath: []))
        guard case .dict(let fields)? = root.busValue else { return [:] }
        return fields
    }

    /// What one encoded value became, filled in by the containers below and read once at the end.
    final class Node {
        enum Content {
            case none
            case value(BusValue)
            case keyed([String: Node])
            case unkeyed([Node])
        }
        var content = Content.none

        var busValue: BusValue? {
            switch content {
            case .none: return nil
            case .value(let value): return value
            case .keyed(let fields): return .dict(fields.compactMapValues(\.busValue))
            case .unkeyed(let nodes):
                let values = nodes.compactMap(\.busValue)
                guard values.count == nodes.count else { return nil }
                let strings = values.compactMap { value -> String? in if case .string(let s) = value { s } else { nil } }
                if strings.count == values.count { return .stringArray(strings) }
                let dicts = values.compactMap { value -> [String: BusValue]? in if case .dict(let d) = value { d } else { nil } }
                return dicts.count == values.count ? .dictArray(dicts) : nil
            }
        }

        func child(_ key: String) -> Node {
            var fields: [String: Node] = [:]
            if case .keyed(let existing) = content { fields = existing }
            let node = fields[key] ?? Node()
            fields[key] = node
            content = .keyed(fields)
            return node
        }

        func appended() -> Node {
            var nodes: [Node] = []
            if case .unkeyed(let existing) = content { nodes = existing }
            let node = Node()
            nodes.append(node)
            content = .unkeyed(nodes)
            return node
        }
    }

    struct NodeEncoder: Encoder {
        let node: Node
        let codingPath: [any CodingKey]
        var userInfo: [CodingUserInfoKey: Any] { [:] }

        func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
            if case .none = node.content { node.content = .keyed([:]) }
            return KeyedEncodingContainer(Keyed<Key>(node: node, codingPath: codingPath))
        }

        func unkeyedContainer() -> any UnkeyedEncodingContainer {
            if case .none = node.content { node.content = .unkeyed([]) }
            return Unkeyed(node: node, codingPath: codingPath)
        }

        func singleValueContainer() -> any SingleValueEncodingContainer { Single(node: node, codingPath: codingPath) }
    }

    /// One value into `node`: the scalars the result types hold, or a nested Encodable.
    static func encode(_ value: some Encodable, into node: Node, codingPath: [any CodingKey]) throws {
        switch value {
        case let value as String: node.content = .value(.string(value))
        case let value as Bool: node.content = .value(.bool(value))
        case let value as Int: node.content = .value(.int64(Int64(value)))
        case let value as Int64: node.content = .value(.int64(value))
        case let value as Int32: node.content = .value(.int64(Int64(value)))
        case let value as UInt32: node.content = .value(.int64(Int64(value)))
        case let value as Double: node.content = .value(.double(value))
        default: try value.encode(to: NodeEncoder(node: node, codingPath: codingPath))
        }
    }

    struct Keyed<Key: CodingKey>: KeyedEncodingContainerProtocol {
        let node: Node
        let codingPath: [any CodingKey]

        mutating func encodeNil(forKey key: Key) throws {}
        mutating func encode<T: Encodable>(_ value: T, forKey key: Key) throws {
            try BusValueEncoder.encode(value, into: node.child(key.stringValue), codingPath: codingPath + [key])
        }
        mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type,
                                                             forKey key: Key) -> KeyedEncodingContainer<NestedKey> {
            NodeEncoder(node: node.child(key.stringValue), codingPath: codingPath + [key]).container(keyedBy: keyType)
        }
        mutating func nestedUnkeyedContainer(forKey key: Key) -> any UnkeyedEncodingContainer {
            NodeEncoder(node: node.child(key.stringValue), codingPath: codingPath + [key]).unkeyedContainer()
        }
        mutating func superEncoder() -> any Encoder { NodeEncoder(node: node, codingPath: codingPath) }
        mutating func superEncoder(forKey key: Key) -> any Encoder {
            NodeEncoder(node: node.child(key.stringValue), codingPath: codingPath + [key])
        }
    }

    struct Unkeyed: UnkeyedEncodingContainer {
        let node: Node
        let codingPath: [any CodingKey]
        var count: Int { if case .unkeyed(let nodes) = node.content { nodes.count } else { 0 } }

        mutating func encodeNil() throws {}
        mutating func encode<T: Encodable>(_ value: T) throws {
            try BusValueEncoder.encode(value, into: node.appended(), codingPath: codingPath)
        }
        mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type) -> KeyedEncodingContainer<NestedKey> {
            NodeEncoder(node: node.appended(), codingPath: codingPath).container(keyedBy: keyType)
        }
        mutating func nestedUnkeyedContainer() -> any UnkeyedEncodingContainer {
            NodeEncoder(node: node.appended(), codingPath: codingPath).unkeyedContainer()
        }
        mutating func superEncoder() -> any Encoder { NodeEncoder(node: node.appended(), codingPath: codingPath) }
    }

    struct Single: SingleValueEncodingContainer {
        let node: Node
        let codingPath: [any CodingKey]

        mutating func encodeNil() throws {}
        mutating func encode<T: Encodable>(_ value: T) throws {
            try BusValueEncoder.encode(value, into: node, codingPath: codingPath)
        }
    }
}
