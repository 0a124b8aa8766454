/// The `token` request and reply without Codable, for `authctl token` and `git-credential` (see ``MiniJSON``).
/// Each function gives nil when it is not certain, and ``AgentClient`` then reads that line as `call` does (events,
/// and lines it refuses).
enum TokenWire {
    /// The request line's JSON (no newline); the same members JSONEncoder writes, nil ones left out.
    static func encode(_ request: WireRequest) -> String {
        var members = ["\"v\":" + String(request.v)]
        if let id = request.id { members.append("\"id\":" + String(id)) }
        members.append("\"op\":" + MiniJSON.quoted(request.op))
        if let account = request.account { members.append("\"account\":" + MiniJSON.quoted(account)) }
        if let minValid = request.minValid { members.append("\"min_valid\":" + String(minValid)) }
        if let forceRefresh = request.forceRefresh { members.append("\"force_refresh\":" + (forceRefresh ? "true" : "false")) }
        if let interactive = request.interactive { members.append("\"interactive\":" + (interactive ? "true" : "false")) }
        if let idToken = request.idToken { members.append("\"id_token\":" + (idToken ? "true" : "false")) }
        if let browser = request.browser { members.append("\"browser\":" + (browser ? "true" : "false")) }
        if let url = request.url { members.append("\"url\":" + MiniJSON.quoted(url)) }
        if let method = request.method { members.append("\"method\":" + MiniJSON.quoted(method)) }
        if let scopes = request.scopes { members.append("\"scopes\":[" + commaSeparated(scopes.map(MiniJSON.quoted)) + "]") }
        if let resource = request.resource { members.append("\"resource\":" + MiniJSON.quoted(resource)) }
        return "{" + commaSeparated(members) + "}"
    }

    /// `joined(separator: ",")` by hand: the standard library's generic `joined` looks up `Element`'s conformance at
    /// run time, and the first such lookup scans every conformance record in the binary (docs/BENCHMARKS.md,
    /// "`authctl token`").
    private static func commaSeparated(_ parts: [String]) -> String {
        var result = ""
        for (index, part) in parts.enumerated() {
            if index > 0 { result += "," }
            result += part
        }
        return result
    }

    enum Reply: Equatable {
        case result(TokenResult)
        case error(WireError)
    }

    /// A protocol-version-1 reply line to request `id` carrying a token result or an error; nil for events and
    /// anything else, a line for another request included (``ReplyReader/answers(_:id:isError:)``).
    static func decode(_ line: [UInt8], request id: Int) -> Reply? {
        guard let reply = MiniJSON.parse(line), case .integer(WireProtocol.version)? = reply["v"],
              let replyID = reply.int("id") else { return nil }
        guard isAbsent(reply["event"]) else { return nil }
        if !isAbsent(reply["error"]) {
            guard isAbsent(reply["result"]), ReplyReader.answers(id, id: replyID, isError: true), let error = reply["error"],
                  case .string(let code)? = error["code"], case .string(let message)? = error["message"],
                  let retryAfter = error.int("retry_after") else { return nil }
            return .error(WireError(code: code, message: message, retryAfter: retryAfter))
        }
        guard ReplyReader.answers(id, id: replyID, isError: false), let result = reply["result"], case .object = result,
              case .string(let account)? = result["account"], case .string(let accessToken)? = result["access_token"],
              case .string(let tokenType)? = result["token_type"], let expiry = expiry(result),
              let scopes = result.strings("scopes"), let idToken = result.string("id_token") else { return nil }
        return .result(TokenResult(account: account, accessToken: accessToken, tokenType: tokenType, expiry: expiry,
                                   scopes: scopes, idToken: idToken))
    }

    /// `does_not_expire: true`, or else `expires_in` and `expires_at`, as ``TokenResult``'s decoder reads them.
    private static func expiry(_ result: MiniJSON) -> TokenExpiry? {
        guard let doesNotExpire = result.bool("does_not_expire") else { return nil }
        if doesNotExpire == true { return .never }
        guard case .integer(let expiresIn)? = result["expires_in"], case .integer(let expiresAt)? = result["expires_at"] else {
            return nil
        }
        return .after(seconds: expiresIn, unixTime: expiresAt)
    }

    private static func isAbsent(_ value: MiniJSON?) -> Bool { value == nil || value == .null }
}

extension WireError {
    /// An error as read from the wire: the code kept as sent (a newer agent's code included).
    init(code: String, message: String, retryAfter: Int?) {
        self.init(.internalError, message, retryAfter: retryAfter)
        self.code = code
    }
}
