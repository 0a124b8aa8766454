/// `Encodable` reply types written as one line of JSON: how the agent answers on its socket, the writer beside
/// ``MiniJSONDecoder``, which reads those lines in `authctl`. Objects with their members sorted by key (byte order),
/// arrays, strings, booleans, integers and `null` (`encodeIfPresent` of nil leaves the member out); the protocol has no
/// fractional numbers, so `Double` and `Float` are refused, as the decoder refuses them.
///
/// Its lines are byte for byte what `JSONEncoder` with `[.sortedKeys, .withoutEscapingSlashes]` writes for the same
/// value (MiniJSONEncoderTests holds the two together for every reply type), which the agent used before: that one
/// builds a tree of boxed values, asks each value at run time whether it is a `Date`, `Data`, `URL` or `Decimal`, and
/// sorts with a generic comparison: for a cached token's reply, a third of the agent's instructions per request
/// (docs/BENCHMARKS-HISTORY.md has the figures before and after).
///
/// Errors name the coding path and the type refused, never a value: a reply carries tokens.
public enum MiniJSONEncoder {
    public static func encode<T: Encodable>(_ value: T) throws -> [UInt8] {
        let root = Node()
        try value.encode(to: ValueEncoder(node: root, path: Path(parent: nil, key: nil)))
        var out: [UInt8] = []
        out.reserveCapacity(256)
        root.write(into: &out)
        return out
    }

    fileprivate static func refused(_ value: Any, _ type: Any.Type, _ codingPath: [any CodingKey]) -> EncodingError {
        .invalidValue(value, EncodingError.Context(codingPath: codingPath,
                                                   debugDescription: "the protocol has no \(type) values"))
    }
}

/// One value being written. A class, so that the containers an `encode(to:)` asks for write into the same place.
/// Strings, integers and booleans are kept as they are and rendered once, when the line is written.
private final class Node {
    enum Value {
        case string(String), integer(Int64), unsigned(UInt64), bool(Bool), null
        case strings([String])
        case node(Node)
    }

    enum Kind { case unset, scalar, object, array }
    var kind = Kind.unset
    var scalar = Value.null
    var members: [(key: String, value: Value)] = []
    var elements: [Value] = []

    func becomeObject() {
        if kind != .object { kind = .object; members = [] }
    }

    func becomeArray() {
        if kind != .array { kind = .array; elements = [] }
    }

    func set(_ value: Value) {
        kind = .scalar
        scalar = value
    }

    /// Sets a member, replacing one of the same key (as JSONEncoder keeps the last).
    func set(_ key: String, _ value: Value) {
        if let index = members.firstIndex(where: { $0.key == key }) {
            members[index].value = value
        } else {
            members.append((key, value))
        }
    }

    func member(_ key: String) -> Node {
        let node = Node()
        set(key, .node(node))
        return node
    }

    func element() -> Node {
        let node = Node()
        elements.append(.node(node))
        return node
    }

    func write(into out: inout [UInt8]) {
        switch kind {
        case .scalar:
            Node.write(scalar, into: &out)
        case .unset, .object:
            out.append(UInt8(ascii: "{"))
            if members.count > 1 { members.sort { $0.key.utf8.lexicographicallyPrecedes($1.key.utf8) } }
            for index in members.indices {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                MiniJSON.write(quoted: members[index].key, into: &out)
                out.append(UInt8(ascii: ":"))
                Node.write(members[index].value, into: &out)
            }
            out.append(UInt8(ascii: "}"))
        case .array:
            out.append(UInt8(ascii: "["))
            for index in elements.indices {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                Node.write(elements[index], into: &out)
            }
            out.append(UInt8(ascii: "]"))
        }
    }

    static func write(_ value: Value, into out: inout [UInt8]) {
        switch value {
        case .string(let string): MiniJSON.write(quoted: string, into: &out)
        case .integer(let integer): out.append(contentsOf: String(integer).utf8)
        case .unsigned(let integer): out.append(contentsOf: String(integer).utf8)
        case .bool(let bool): out.append(contentsOf: (bool ? "true" : "false").utf8)
        case .null: out.append(contentsOf: "null".utf8)
        case .strings(let strings):
            out.append(UInt8(ascii: "["))
            for index in strings.indices {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                MiniJSON.write(quoted: strings[index], into: &out)
            }
            out.append(UInt8(ascii: "]"))
        case .node(let node): node.write(into: &out)
        }
    }
}

/// Where a value is, built only when asked for (an error, or a type that reads its `codingPath`): most values never are.
private final class Path {
    let parent: Path?
    let key: (any CodingKey)?
    init(parent: Path?, key: (any CodingKey)?) { (self.parent, self.key) = (parent, key) }

    var keys: [any CodingKey] {
        var keys: [any CodingKey] = []
        var path: Path? = self
        while let step = path {
            if let key = step.key { keys.append(key) }
            path = step.parent
        }
        return keys.reversed()
    }
}

/// One value and where it is; also its own single-value container.
private struct ValueEncoder: Encoder, SingleValueEncodingContainer {
    let node: Node
    let path: Path
    var codingPath: [any CodingKey] { path.keys }
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
        node.becomeObject()
        return KeyedEncodingContainer(KeyedContainer<Key>(node: node, path: path))
    }

    func unkeyedContainer() -> any UnkeyedEncodingContainer {
        node.becomeArray()
        return UnkeyedContainer(node: node, path: path)
    }

    func singleValueContainer() -> any SingleValueEncodingContainer { self }

    func encodeNil() { node.set(.null) }
    func encode(_ value: Bool) { node.set(.bool(value)) }
    func encode(_ value: String) { node.set(.string(value)) }
    func encode(_ value: Double) throws { throw MiniJSONEncoder.refused(value, Double.self, codingPath) }
    func encode(_ value: Float) throws { throw MiniJSONEncoder.refused(value, Float.self, codingPath) }
    func encode(_ value: Int) { node.set(.integer(Int64(value))) }
    func encode(_ value: Int8) { node.set(.integer(Int64(value))) }
    func encode(_ value: Int16) { node.set(.integer(Int64(value))) }
    func encode(_ value: Int32) { node.set(.integer(Int64(value))) }
    func encode(_ value: Int64) { node.set(.integer(value)) }
    func encode(_ value: UInt) { node.set(.unsigned(UInt64(value))) }
    func encode(_ value: UInt8) { node.set(.unsigned(UInt64(value))) }
    func encode(_ value: UInt16) { node.set(.unsigned(UInt64(value))) }
    func encode(_ value: UInt32) { node.set(.unsigned(UInt64(value))) }
    func encode(_ value: UInt64) { node.set(.unsigned(value)) }
    func encode<T: Encodable>(_ value: T) throws { try value.encode(to: self) }
}

private struct KeyedContainer<Key: CodingKey>: KeyedEncodingContainerProtocol {
    let node: Node
    let path: Path
    var codingPath: [any CodingKey] { path.keys }

    private func value(_ key: Key) -> ValueEncoder {
        ValueEncoder(node: node.member(key.stringValue), path: Path(parent: path, key: key))
    }

    mutating func encodeNil(forKey key: Key) { node.set(key.stringValue, .null) }
    mutating func encode(_ value: Bool, forKey key: Key) { node.set(key.stringValue, .bool(value)) }
    mutating func encode(_ value: String, forKey key: Key) { node.set(key.stringValue, .string(value)) }
    mutating func encode(_ value: Double, forKey key: Key) throws { try self.value(key).encode(value) }
    mutating func encode(_ value: Float, forKey key: Key) throws { try self.value(key).encode(value) }
    mutating func encode(_ value: Int, forKey key: Key) { node.set(key.stringValue, .integer(Int64(value))) }
    mutating func encode(_ value: Int8, forKey key: Key) { node.set(key.stringValue, .integer(Int64(value))) }
    mutating func encode(_ value: Int16, forKey key: Key) { node.set(key.stringValue, .integer(Int64(value))) }
    mutating func encode(_ value: Int32, forKey key: Key) { node.set(key.stringValue, .integer(Int64(value))) }
    mutating func encode(_ value: Int64, forKey key: Key) { node.set(key.stringValue, .integer(value)) }
    mutating func encode(_ value: UInt, forKey key: Key) { node.set(key.stringValue, .unsigned(UInt64(value))) }
    mutating func encode(_ value: UInt8, forKey key: Key) { node.set(key.stringValue, .unsigned(UInt64(value))) }
    mutating func encode(_ value: UInt16, forKey key: Key) { node.set(key.stringValue, .unsigned(UInt64(value))) }
    mutating func encode(_ value: UInt32, forKey key: Key) { node.set(key.stringValue, .unsigned(UInt64(value))) }
    mutating func encode(_ value: UInt64, forKey key: Key) { node.set(key.stringValue, .unsigned(value)) }
    mutating func encode<T: Encodable>(_ value: T, forKey key: Key) throws {
        // The reply types' optional members come here through `encodeIfPresent`: the common ones without a container.
        if T.self == String.self { return node.set(key.stringValue, .string(value as! String)) }
        if T.self == Int.self { return node.set(key.stringValue, .integer(Int64(value as! Int))) }
        if T.self == Bool.self { return node.set(key.stringValue, .bool(value as! Bool)) }
        if T.self == [String].self { return node.set(key.stringValue, .strings(value as! [String])) }
        try value.encode(to: self.value(key))
    }

    mutating func encodeIfPresent(_ value: String?, forKey key: Key) { if let value { node.set(key.stringValue, .string(value)) } }
    mutating func encodeIfPresent(_ value: Int?, forKey key: Key) { if let value { node.set(key.stringValue, .integer(Int64(value))) } }
    mutating func encodeIfPresent(_ value: Bool?, forKey key: Key) { if let value { node.set(key.stringValue, .bool(value)) } }
    mutating func encodeIfPresent<T: Encodable>(_ value: T?, forKey key: Key) throws {
        if let value { try encode(value, forKey: key) }
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type,
                                                        forKey key: Key) -> KeyedEncodingContainer<NestedKey> {
        value(key).container(keyedBy: keyType)
    }

    mutating func nestedUnkeyedContainer(forKey key: Key) -> any UnkeyedEncodingContainer { value(key).unkeyedContainer() }
    mutating func superEncoder() -> any Encoder { ValueEncoder(node: node.member("super"), path: path) }
    mutating func superEncoder(forKey key: Key) -> any Encoder { value(key) }
}

private struct UnkeyedContainer: UnkeyedEncodingContainer {
    let node: Node
    let path: Path
    var codingPath: [any CodingKey] { path.keys }
    var count: Int { node.elements.count }

    private func next() -> ValueEncoder {
        let index = Index(intValue: node.elements.count)
        return ValueEncoder(node: node.element(), path: Path(parent: path, key: index))
    }

    mutating func encodeNil() { node.elements.append(.null) }
    mutating func encode(_ value: Bool) { node.elements.append(.bool(value)) }
    mutating func encode(_ value: String) { node.elements.append(.string(value)) }
    mutating func encode(_ value: Double) throws { try next().encode(value) }
    mutating func encode(_ value: Float) throws { try next().encode(value) }
    mutating func encode(_ value: Int) { node.elements.append(.integer(Int64(value))) }
    mutating func encode(_ value: Int8) { node.elements.append(.integer(Int64(value))) }
    mutating func encode(_ value: Int16) { node.elements.append(.integer(Int64(value))) }
    mutating func encode(_ value: Int32) { node.elements.append(.integer(Int64(value))) }
    mutating func encode(_ value: Int64) { node.elements.append(.integer(value)) }
    mutating func encode(_ value: UInt) { node.elements.append(.unsigned(UInt64(value))) }
    mutating func encode(_ value: UInt8) { node.elements.append(.unsigned(UInt64(value))) }
    mutating func encode(_ value: UInt16) { node.elements.append(.unsigned(UInt64(value))) }
    mutating func encode(_ value: UInt32) { node.elements.append(.unsigned(UInt64(value))) }
    mutating func encode(_ value: UInt64) { node.elements.append(.unsigned(value)) }
    mutating func encode<T: Encodable>(_ value: T) throws {
        if T.self == String.self { return node.elements.append(.string(value as! String)) }
        try value.encode(to: next())
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type) -> KeyedEncodingContainer<NestedKey> {
        next().container(keyedBy: keyType)
    }

    mutating func nestedUnkeyedContainer() -> any UnkeyedEncodingContainer { next().unkeyedContainer() }
    mutating func superEncoder() -> any Encoder { next() }

    private struct Index: CodingKey {
        let intValue: Int?
        var stringValue: String { "Index \(intValue ?? 0)" }
        init(intValue: Int) { self.intValue = intValue }
        init?(stringValue: String) { nil }
    }
}
