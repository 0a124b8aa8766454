import AgentIPC
import AuthCore
import Foundation
import Logging

/// Facts about the running agent that `status` reports.
public struct AgentInfo: Sendable {
    public var version: String
    public var pid: Int
    public var startedAt: ContinuousClock.Instant
    public var socketPath: String

    public init(version: String, pid: Int, startedAt: ContinuousClock.Instant, socketPath: String) {
        self.version = version
        self.pid = pid
        self.startedAt = startedAt
        self.socketPath = socketPath
    }
}

/// The socket protocol's front end: decodes a request line, runs it as one of the shared ``AgentOperations`` (which
/// the D-Bus object calls too) and encodes the result, event or error as reply lines.
public struct RequestDispatcher: Sendable {
    public enum Decoded: Sendable {
        case request(WireRequest)
        case invalid(id: Int?, WireError)
    }

    /// The typed operations this dispatcher maps requests onto; the D-Bus object uses the same ones.
    public let operations: AgentOperations

    public init(broker: TokenBroker, info: AgentInfo, logger: Logger) {
        self.operations = AgentOperations(broker: broker, info: info, logger: logger)
    }

    /// Parses one request line. Malformed JSON, a missing or unknown version and unknown operations become errors.
    public func decode(_ line: [UInt8]) -> Decoded { RequestDispatcher.decode(line) }

    /// The decoder itself: pure, so it is fuzzed on its own (Tests/FuzzTests). The line is parsed once: the envelope
    /// (`v`, `id`, `op`) and the request's fields are read from the same parsed value.
    public static func decode(_ line: [UInt8]) -> Decoded {
        guard let envelope = try? requestDecoder.decode(Envelope.self, from: Data(line)) else {
            return .invalid(id: nil, WireError(.badRequest, "the request is not a JSON object with integer 'v' and 'id' and string 'op'"))
        }
        guard let version = envelope.v else {
            return .invalid(id: envelope.id, WireError(.badRequest, "the request has no protocol version 'v'"))
        }
        guard version == WireProtocol.version else {
            return .invalid(id: envelope.id, WireError(.unsupportedVersion,
                "protocol version \(version) is not supported; this agent speaks version \(WireProtocol.version)"))
        }
        guard let op = envelope.op else { return .invalid(id: envelope.id, WireError(.badRequest, "the request has no 'op'")) }
        guard Operation(rawValue: op) != nil else {
            return .invalid(id: envelope.id, WireError(.unknownOp,
                "unknown operation '\(String(op.prefix(64)))'; known: \(Operation.allCases.map(\.rawValue).joined(separator: ", "))"))
        }
        guard let request = envelope.request else {
            return .invalid(id: envelope.id, WireError(.badRequest, "a field of the '\(op)' request has the wrong type"))
        }
        return .request(request)
    }

    /// Shared: it has no per-request options, and JSONDecoder may be used from several threads at once.
    private static let requestDecoder = JSONDecoder()

    /// A request line read in one pass: the envelope must decode (an object with integer `v`/`id` and string `op`
    /// when present, else the line is not a request at all); the full ``WireRequest`` is nil when another field
    /// has the wrong type (or `v`/`op` is missing), which ``decode(_:)`` reports after the envelope's own checks.
    struct Envelope: Decodable {
        var v: Int?
        var id: Int?
        var op: String?
        var request: WireRequest?

        enum Keys: String, CodingKey { case v, id, op }

        init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: Keys.self)
            v = try container.decodeIfPresent(Int.self, forKey: .v)
            id = try container.decodeIfPresent(Int.self, forKey: .id)
            op = try container.decodeIfPresent(String.self, forKey: .op)
            request = try? WireRequest(from: decoder)
        }
    }

    /// Operations that wait for a person; they are cancelled when the client goes away.
    public func waitsForPerson(_ request: WireRequest) -> Bool {
        request.op == Operation.login.rawValue || (request.op == Operation.token.rawValue && request.interactive == true)
    }

    /// Executes a request and returns the final reply line (without newline). Event lines go through `emit`.
    public func execute(_ request: WireRequest, caller: Caller,
                        emit: @escaping @Sendable ([UInt8]) async -> Void) async -> [UInt8] {
        let op = Operation(rawValue: request.op) ?? .ping
        let ops = operations
        let id = request.id
        let loginStarted: @Sendable (WireEvent) async -> Void = {
            await emit(RequestDispatcher.encodeLine(WireResponse<NoResult>(id: id, event: $0)))
        }
        do throws(WireError) {
            return try await ops.perform(op, account: request.account, caller: caller) { () async throws(WireError) -> [UInt8] in
                switch op {
                case .ping:
                    return encode(id, ops.ping())
                case .status:
                    return encode(id, await ops.status())
                case .accounts:
                    return encode(id, await ops.accounts())
                case .token:
                    return encode(id, try await ops.token(
                        account: try requireAccount(request), minValid: request.minValid ?? 0,
                        forceRefresh: request.forceRefresh ?? false, interactive: request.interactive ?? false,
                        includeIDToken: request.idToken ?? false, method: try loginMethod(request),
                        scopes: request.scopes, resource: request.resource, loginStarted: loginStarted))
                case .login:
                    return encode(id, try await ops.login(account: try requireAccount(request), browser: request.browser ?? true,
                                                          method: try loginMethod(request), loginStarted: loginStarted))
                case .loginCallback:
                    return encode(id, try await ops.loginCallback(account: request.account, url: request.url))
                case .logout:
                    return encode(id, try await ops.logout(account: try requireAccount(request)))
                case .diagnose:
                    return encode(id, try await ops.diagnose(account: request.account))
                }
            }
        } catch {
            return encodeError(id, error)
        }
    }

    private func requireAccount(_ request: WireRequest) throws(WireError) -> String {
        guard let account = request.account, !account.isEmpty else {
            throw WireError(.badRequest, "the '\(request.op)' request needs an 'account'")
        }
        return account
    }

    private func loginMethod(_ request: WireRequest) throws(WireError) -> LoginMethod {
        guard let text = request.method else { return .redirect }
        guard let name = LoginMethodName(rawValue: text), let method = LoginMethod(rawValue: name.rawValue) else {
            throw WireError(.badRequest, "unknown sign-in method '\(String(text.prefix(32)))'; known: \(LoginMethodName.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        return method
    }

    /// Domain codes map one-to-one onto wire codes (see ``AgentOperations/wireCode(_:)``).
    public static func wireCode(_ code: AuthError.Code) -> ErrorCode { AgentOperations.wireCode(code) }

    // MARK: Encoding

    public func encode<R: Codable & Sendable>(_ id: Int?, _ result: R) -> [UInt8] {
        RequestDispatcher.encodeLine(WireResponse(id: id, result: result))
    }

    public func encodeError(_ id: Int?, _ error: WireError) -> [UInt8] {
        RequestDispatcher.encodeLine(WireResponse<NoResult>(id: id, error: error))
    }

    static func encodeLine<T: Encodable>(_ value: T) -> [UInt8] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return (try? Array(encoder.encode(value))) ?? Array(#"{"v":1,"error":{"code":"internal_error","message":"cannot encode reply"}}"#.utf8)
    }
}
