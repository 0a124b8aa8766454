import CAgentBus
import Glibc

/// A reference to an `sd_bus_message` that may cross threads as a value; it is only dereferenced on the bus
/// thread (see ``BusLoop``).
struct BusMessageRef: @unchecked Sendable {
    let raw: OpaquePointer
}

/// Reading arguments from and appending ``BusValue``s to sd-bus messages (bus thread only). The fixed-argument
/// `sd_bus_message_read_basic` / `append_basic` / `open_container` calls, so no C shim is needed.
enum BusMessage {
    static func type(_ c: Unicode.Scalar) -> CChar { CChar(UInt8(ascii: c)) }

    static func readString(_ m: OpaquePointer) -> String? {
        var value: UnsafePointer<CChar>?
        guard sd_bus_message_read_basic(m, type("s"), &value) > 0, let value else { return nil }
        return String(cString: value)
    }

    static func readUInt32(_ m: OpaquePointer) -> UInt32? {
        var value: UInt32 = 0
        guard sd_bus_message_read_basic(m, type("u"), &value) > 0 else { return nil }
        return value
    }

    /// The call, or nil for a member this interface does not have.
    static func readCall(_ m: OpaquePointer) -> BusCall? {
        guard let raw = sd_bus_message_get_member(m) else { return nil }
        switch String(cString: raw) {
        case "GetAccessToken":
            guard let account = readString(m), let minValid = readUInt32(m) else { return nil }
            return .getAccessToken(account: account, minValid: minValid)
        case "GetAccessTokenForRequest":
            guard let account = readString(m), let minValid = readUInt32(m), let method = readString(m),
                  let url = readString(m), let nonce = readString(m) else { return nil }
            return .getAccessTokenForRequest(account: account, minValid: minValid, method: method, url: url,
                                             nonce: nonce.isEmpty ? nil : nonce)
        case "ListAccounts": return .listAccounts
        case "GetStatus": return .getStatus
        case "Login": return readString(m).map { .login(account: $0) }
        case "Logout": return readString(m).map { .logout(account: $0) }
        case "Subscribe": return .subscribe
        default: return nil
        }
    }

    /// Sends `reply` for `call`. Returns a negative errno on failure.
    @discardableResult
    static func send(_ reply: BusReply, for call: OpaquePointer) -> Int32 {
        switch reply {
        case .error(let name, let message):
            return aa_bus_reply_error(call, name, message)
        case .values(let values):
            var message: OpaquePointer?
            var r = sd_bus_message_new_method_return(call, &message)
            guard r >= 0, let message else { return r }
            defer { _ = sd_bus_message_unref(message) }
            for value in values {
                r = append(value, to: message)
                if r < 0 { return aa_bus_reply_error(call, "org.freedesktop.DBus.Error.Failed", "cannot encode the reply") }
            }
            return sd_bus_send(nil, message, nil)
        }
    }

    static func append(_ value: BusValue, to m: OpaquePointer) -> Int32 {
        switch value {
        case .string(let string):
            return string.withCString { sd_bus_message_append_basic(m, type("s"), $0) }
        case .bool(let bool):
            var int: Int32 = bool ? 1 : 0
            return sd_bus_message_append_basic(m, type("b"), &int)
        case .int64(var int):
            return sd_bus_message_append_basic(m, type("x"), &int)
        case .double(var double):
            return sd_bus_message_append_basic(m, type("d"), &double)
        case .stringArray(let strings):
            return container(m, "a", "s") { strings.reduce(Int32(0)) { r, s in r < 0 ? r : append(.string(s), to: m) } }
        case .dict(let fields):
            return container(m, "a", "{sv}") {
                var r: Int32 = 0
                for key in fields.keys.sorted() {
                    guard let field = fields[key] else { continue }
                    r = container(m, "e", "sv") {
                        let k = append(.string(key), to: m)
                        return k < 0 ? k : container(m, "v", field.signature) { append(field, to: m) }
                    }
                    if r < 0 { break }
                }
                return r
            }
        case .dictArray(let items):
            return container(m, "a", "a{sv}") { items.reduce(Int32(0)) { r, item in r < 0 ? r : append(.dict(item), to: m) } }
        }
    }

    private static func container(_ m: OpaquePointer, _ kind: Unicode.Scalar, _ contents: String, _ body: () -> Int32) -> Int32 {
        var r = sd_bus_message_open_container(m, type(kind), contents)
        guard r >= 0 else { return r }
        r = body()
        guard r >= 0 else { return r }
        return sd_bus_message_close_container(m)
    }
}
