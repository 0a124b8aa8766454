/// A D-Bus value of the few shapes the agent's interface uses. Results are maps from the socket protocol's field
/// names to variants (`a{sv}`), encoded from the same Codable result types the socket encodes, so both front ends
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

    /// `value` (a result type of the socket protocol) as an `a{sv}` map under the socket's field names
    /// (``BusValueEncoder``).
    public static func dictionary<T: Encodable>(encoding value: T) -> [String: BusValue] {
        BusValueEncoder.dictionary(value)
    }
}
