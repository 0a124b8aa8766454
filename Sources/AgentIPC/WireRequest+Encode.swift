extension WireRequest {
    /// The request as one line of JSON, without its newline: the members `JSONEncoder` would write, in declaration
    /// order, nil ones left out (the agent reads it with ``decode(line:)``; a test holds the two to each other).
    /// Written by hand so that `authctl`, which sends one request per process, does not pay Codable's start-up.
    public var line: String {
        var members = ["\"v\":" + String(v)]
        if let id { members.append("\"id\":" + String(id)) }
        members.append("\"op\":" + MiniJSON.quoted(op))
        if let account { members.append("\"account\":" + MiniJSON.quoted(account)) }
        if let minValid { members.append("\"min_valid\":" + String(minValid)) }
        if let forceRefresh { members.append("\"force_refresh\":" + (forceRefresh ? "true" : "false")) }
        if let interactive { members.append("\"interactive\":" + (interactive ? "true" : "false")) }
        if let idToken { members.append("\"id_token\":" + (idToken ? "true" : "false")) }
        if let browser { members.append("\"browser\":" + (browser ? "true" : "false")) }
        if let url { members.append("\"url\":" + MiniJSON.quoted(url)) }
        if let method { members.append("\"method\":" + MiniJSON.quoted(method)) }
        if let scopes { members.append("\"scopes\":[" + WireRequest.commaSeparated(scopes.map(MiniJSON.quoted)) + "]") }
        if let resource { members.append("\"resource\":" + MiniJSON.quoted(resource)) }
        if let since { members.append("\"since\":" + String(since)) }
        if let before { members.append("\"before\":" + String(before)) }
        if let request { members.append("\"request\":" + String(request)) }
        if let client { members.append("\"client\":" + MiniJSON.quoted(client)) }
        if let dpopMethod { members.append("\"dpop_method\":" + MiniJSON.quoted(dpopMethod)) }
        if let dpopURL { members.append("\"dpop_url\":" + MiniJSON.quoted(dpopURL)) }
        if let dpopNonce { members.append("\"dpop_nonce\":" + MiniJSON.quoted(dpopNonce)) }
        if let host { members.append("\"host\":" + MiniJSON.quoted(host)) }
        if let session { members.append("\"session\":" + MiniJSON.quoted(session)) }
        if let pid { members.append("\"pid\":" + String(pid)) }
        if let fingerprint { members.append("\"fingerprint\":" + MiniJSON.quoted(fingerprint)) }
        if let program { members.append("\"program\":" + MiniJSON.quoted(program)) }
        if let thisRun { members.append("\"this_run\":" + (thisRun ? "true" : "false")) }
        return "{" + WireRequest.commaSeparated(members) + "}"
    }

    /// `joined(separator: ",")` by hand: the standard library's generic `joined` looks up `Element`'s conformance at
    /// run time, and the first such lookup scans every conformance record in the binary.
    private static func commaSeparated(_ parts: [String]) -> String {
        var result = ""
        for (index, part) in parts.enumerated() {
            if index > 0 { result += "," }
            result += part
        }
        return result
    }
}
