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

/// Turns protocol requests into ``TokenBroker`` calls and domain results or errors into protocol replies. The only
/// place where wire types and domain types meet.
public struct RequestDispatcher: Sendable {
    public enum Decoded: Sendable {
        case request(WireRequest)
        case invalid(id: Int?, WireError)
    }

    let broker: TokenBroker
    let info: AgentInfo
    let logger: Logger

    public init(broker: TokenBroker, info: AgentInfo, logger: Logger) {
        self.broker = broker
        self.info = info
        self.logger = logger
    }

    /// Parses one request line. Malformed JSON, a missing or unknown version and unknown operations become errors.
    public func decode(_ line: [UInt8]) -> Decoded { RequestDispatcher.decode(line) }

    /// The decoder itself: pure, so it is fuzzed on its own (Tests/FuzzTests).
    public static func decode(_ line: [UInt8]) -> Decoded {
        struct Probe: Decodable { var v: Int?; var id: Int?; var op: String? }
        let decoder = JSONDecoder()
        guard let probe = try? decoder.decode(Probe.self, from: Data(line)) else {
            return .invalid(id: nil, WireError(.badRequest, "the request is not a JSON object with integer 'v' and 'id' and string 'op'"))
        }
        guard let version = probe.v else {
            return .invalid(id: probe.id, WireError(.badRequest, "the request has no protocol version 'v'"))
        }
        guard version == WireProtocol.version else {
            return .invalid(id: probe.id, WireError(.unsupportedVersion,
                "protocol version \(version) is not supported; this agent speaks version \(WireProtocol.version)"))
        }
        guard let op = probe.op else { return .invalid(id: probe.id, WireError(.badRequest, "the request has no 'op'")) }
        guard Operation(rawValue: op) != nil else {
            return .invalid(id: probe.id, WireError(.unknownOp,
                "unknown operation '\(String(op.prefix(64)))'; known: \(Operation.allCases.map(\.rawValue).joined(separator: ", "))"))
        }
        do {
            return .request(try decoder.decode(WireRequest.self, from: Data(line)))
        } catch {
            return .invalid(id: probe.id, WireError(.badRequest, "a field of the '\(op)' request has the wrong type"))
        }
    }

    /// Operations that wait for a person; they are cancelled when the client goes away.
    public func waitsForPerson(_ request: WireRequest) -> Bool {
        request.op == Operation.login.rawValue || (request.op == Operation.token.rawValue && request.interactive == true)
    }

    /// Executes a request and returns the final reply line (without newline). Event lines go through `emit`.
    public func execute(_ request: WireRequest, peer: PeerCredentials,
                        emit: @escaping @Sendable ([UInt8]) async -> Void) async -> [UInt8] {
        let op = Operation(rawValue: request.op) ?? .ping
        var meta: Logger.Metadata = ["operation": "\(op.rawValue)", "peer_pid": "\(peer.pid)", "peer_uid": "\(peer.uid)"]
        if let account = request.account { meta["account"] = "\(account)" }
        logger.debug("request", metadata: meta)
        do throws(WireError) {
            switch op {
            case .ping:
                return encode(request.id, PingResult(agentVersion: info.version))
            case .status:
                return encode(request.id, await status())
            case .accounts:
                let status = await broker.status()
                return encode(request.id, AccountsResult(accounts: status.accounts.map {
                    AccountSummary(name: $0.name, issuer: $0.issuer, clientID: $0.clientID,
                                   redirectURI: $0.registeredRedirectURI, scopes: $0.scopes)
                }))
            case .token:
                let account = try requireAccount(request)
                guard (request.minValid ?? 0) >= 0, (request.minValid ?? 0) <= 366 * 24 * 3600 else {
                    throw WireError(.badRequest, "min_valid must be between 0 and 31622400 seconds")
                }
                let grant = try await translate { () async throws(AuthError) -> AccessTokenGrant in
                    if request.interactive == true {
                        // Announce the sign-in if one is needed, so the caller can show the URL.
                        do throws(AuthError) {
                            return try await broker.accessToken(account: account, minValid: .seconds(request.minValid ?? 0),
                                                                forceRefresh: request.forceRefresh ?? false)
                        } catch let error where error.code == .loginRequired {
                            let ticket = try await broker.beginLogin(account: account)
                            await emit(encodeEvent(request.id, ticket))
                            _ = try await broker.awaitLogin(ticket)
                        }
                    }
                    return try await broker.accessToken(account: account, minValid: .seconds(request.minValid ?? 0),
                                                        forceRefresh: request.forceRefresh ?? false && request.interactive != true)
                }
                return encode(request.id, TokenResult(
                    account: grant.account, accessToken: grant.accessToken.reveal(), tokenType: grant.tokenType,
                    expiresIn: Int(grant.expiresIn.components.seconds), expiresAt: Int(grant.expiresAt.timeIntervalSince1970),
                    scopes: grant.scopes, idToken: request.idToken == true ? grant.idToken?.reveal() : nil))
            case .login:
                let account = try requireAccount(request)
                let outcome = try await translate { () async throws(AuthError) -> LoginOutcome in
                    let ticket = try await broker.beginLogin(account: account, openBrowser: request.browser ?? true)
                    await emit(encodeEvent(request.id, ticket))
                    return try await broker.awaitLogin(ticket)
                }
                return encode(request.id, LoginResult(
                    account: outcome.account, subject: outcome.subject, email: outcome.email, name: outcome.name,
                    scopes: outcome.scopes, hasRefreshToken: outcome.hasRefreshToken,
                    accessTokenExpiresAt: Int(outcome.accessTokenExpiresAt.timeIntervalSince1970)))
            case .loginCallback:
                let account = try requireAccount(request)
                guard let url = request.url, !url.isEmpty else {
                    throw WireError(.badRequest, "the 'login_callback' request needs a 'url'")
                }
                try await translate { () async throws(AuthError) in
                    try await broker.submitRedirect(account: account, url: url)
                }
                return encode(request.id, LoginCallbackResult(account: account, accepted: true))
            case .logout:
                let account = try requireAccount(request)
                let outcome = try await translate { () async throws(AuthError) -> LogoutOutcome in
                    try await broker.logout(account: account)
                }
                return encode(request.id, LogoutResult(account: outcome.account, hadRefreshToken: outcome.hadRefreshToken,
                                                       revoked: outcome.revoked, revocationError: outcome.revocationError))
            }
        } catch {
            meta["error_code"] = "\(error.code)"
            logger.info("request failed", metadata: meta)
            return encodeError(request.id, error)
        }
    }

    func status() async -> StatusResult {
        let status = await broker.status()
        let uptime = ContinuousClock.now - info.startedAt
        return StatusResult(
            agent: .init(version: info.version, pid: info.pid, uptimeSeconds: Int(uptime.components.seconds),
                         socket: info.socketPath, keyring: status.keyring.rawValue),
            accounts: status.accounts.map { account in
                StatusResult.Account(
                    name: account.name, issuer: account.issuer, clientID: account.clientID,
                    redirectURI: account.registeredRedirectURI, scopes: account.scopes, signedIn: account.hasRefreshToken,
                    accessTokenExpiresAt: account.accessTokenExpiresAt.map { Int($0.timeIntervalSince1970) },
                    accessTokenExpiresIn: account.accessTokenExpiresIn.map { Int($0.components.seconds) },
                    lastRefresh: account.lastRefresh.map { Int($0.timeIntervalSince1970) },
                    lastError: account.lastError.map {
                        .init(code: RequestDispatcher.wireCode($0.code).rawValue, message: $0.message, at: Int($0.at.timeIntervalSince1970))
                    },
                    loginPending: account.loginPending)
            })
    }

    private func requireAccount(_ request: WireRequest) throws(WireError) -> String {
        guard let account = request.account, !account.isEmpty else {
            throw WireError(.badRequest, "the '\(request.op)' request needs an 'account'")
        }
        return account
    }

    private func translate<T>(_ body: () async throws(AuthError) -> T) async throws(WireError) -> T {
        do {
            return try await body()
        } catch {
            throw WireError(RequestDispatcher.wireCode(error.code), error.message, retryAfter: error.retryAfter)
        }
    }

    /// Domain codes map one-to-one onto wire codes; the test suite checks that every one of them does.
    public static func wireCode(_ code: AuthError.Code) -> ErrorCode {
        ErrorCode(rawValue: code.rawValue) ?? .internalError
    }

    // MARK: Encoding

    public func encode<R: Codable & Sendable>(_ id: Int?, _ result: R) -> [UInt8] {
        RequestDispatcher.encodeLine(WireResponse(id: id, result: result))
    }

    public func encodeError(_ id: Int?, _ error: WireError) -> [UInt8] {
        RequestDispatcher.encodeLine(WireResponse<NoResult>(id: id, error: error))
    }

    func encodeEvent(_ id: Int?, _ ticket: LoginTicket) -> [UInt8] {
        RequestDispatcher.encodeLine(WireResponse<NoResult>(id: id, event: WireEvent(
            type: WireEvent.loginStarted, url: ticket.authorizationURL.absoluteString, redirectURI: ticket.redirectURI,
            browserOpened: ticket.browserOpened, browserError: ticket.browserError,
            timeoutSeconds: Int(ticket.timeout.components.seconds))))
    }

    static func encodeLine<T: Encodable>(_ value: T) -> [UInt8] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return (try? Array(encoder.encode(value))) ?? Array(#"{"v":1,"error":{"code":"internal_error","message":"cannot encode reply"}}"#.utf8)
    }
}
