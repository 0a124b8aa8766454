import FoundationEssentials

/// A member name that a JSON object repeats: ``JSONValue`` refuses the whole document.
///
/// JSONDecoder keeps one of the values (the first) where JSONSerialization kept the last and other parsers differ
/// again, so a repeated `sub`, `aud`, `access_token` or `issuer` can mean one thing to jwt-kit or the provider and
/// another to the agent. RFC 7519 §4 lets a JWT parser reject duplicate claim names; the agent does so for every
/// document it reads from a provider.
public struct DuplicateJSONMember: Error, Sendable, Equatable {
    /// The repeated name, printable characters only and at most 64 of them (names are not secrets; values are never
    /// kept).
    public let name: String

    init(_ raw: String) {
        name = String(String.UnicodeScalarView(raw.unicodeScalars.filter { $0.value >= 0x20 && $0.value < 0x7F }).prefix(64))
    }

    /// The error a caller throws: `what` names the document ("the ID token's claims").
    public func authError(_ code: AuthError.Code, _ what: String) -> AuthError {
        AuthError(code, "\(what) names the member '\(name)' more than once; the agent refuses ambiguous JSON")
    }
}

/// Finds the first member name repeated within one object, at any depth. Names compare as JSONDecoder's keys do: after
/// unescaping (`"s\u0075b"` is `"sub"`), as Swift strings. Malformed input is not judged here (JSONDecoder refuses
/// it); the scan only has to stay in bounds on it.
enum JSONDuplicateScan {
    static func firstDuplicate(in bytes: [UInt8]) -> DuplicateJSONMember? {
        // One frame per open container: the names seen so far (nil for an array) and whether a name comes next.
        var frames: [(names: Set<String>?, expectName: Bool)] = []
        var index = 0
        while index < bytes.count {
            switch bytes[index] {
            case UInt8(ascii: "{"):
                frames.append((Set(), true))
            case UInt8(ascii: "["):
                frames.append((nil, false))
            case UInt8(ascii: "}"), UInt8(ascii: "]"):
                if !frames.isEmpty { frames.removeLast() }
            case UInt8(ascii: ","):
                if let last = frames.indices.last, frames[last].names != nil { frames[last].expectName = true }
            case UInt8(ascii: "\""):
                let (text, end) = string(bytes, from: index + 1)
                if let last = frames.indices.last, frames[last].expectName {
                    frames[last].expectName = false
                    if frames[last].names?.insert(text).inserted == false { return DuplicateJSONMember(text) }
                }
                index = end
            default:
                break
            }
            index += 1
        }
        return nil
    }

    /// The string whose body starts at `start`, unescaped, and the index of its closing quote (or the end).
    private static func string(_ bytes: [UInt8], from start: Int) -> (String, Int) {
        var units: [UInt16] = []
        var raw: [UInt8] = []
        func flush() {
            units.append(contentsOf: String(decoding: raw, as: UTF8.self).utf16)
            raw.removeAll()
        }
        var index = start
        while index < bytes.count, bytes[index] != UInt8(ascii: "\"") {
            guard bytes[index] == UInt8(ascii: "\\"), index + 1 < bytes.count else {
                raw.append(bytes[index])
                index += 1
                continue
            }
            flush()
            let escaped = bytes[index + 1]
            index += 2
            switch escaped {
            case UInt8(ascii: "u"):
                let hex = bytes[min(index, bytes.count)..<min(index + 4, bytes.count)]
                units.append(UInt16(String(decoding: hex, as: UTF8.self), radix: 16) ?? 0xFFFD)
                index += 4
            case UInt8(ascii: "b"): units.append(0x08)
            case UInt8(ascii: "f"): units.append(0x0C)
            case UInt8(ascii: "n"): units.append(0x0A)
            case UInt8(ascii: "r"): units.append(0x0D)
            case UInt8(ascii: "t"): units.append(0x09)
            default: units.append(UInt16(escaped))  // \" \\ \/
            }
        }
        flush()
        return (String(decoding: units, as: UTF16.self), index)
    }
}
