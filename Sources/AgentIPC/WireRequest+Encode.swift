extension WireRequest {
    /// The request as one line of JSON, without its newline: `v`, `id`, `op`, then ``members`` in their order, nil
    /// ones left out (the agent reads it with ``decode(line:)``; a test holds the two to each other).
    /// Written by hand so that `authctl`, which sends one request per process, does not pay Codable's start-up.
    public var line: String {
        var members = ["\"v\":" + String(v)]
        if let id { members.append("\"id\":" + String(id)) }
        members.append("\"op\":" + MiniJSON.quoted(op))
        var request = self
        for (name, kind) in WireRequest.members {
            var text: String?
            switch kind {
            case .string(let slot): slot(&request) { text = $0.map(MiniJSON.quoted) }
            case .int(let slot): slot(&request) { text = $0.map { String($0) } }
            case .bool(let slot): slot(&request) { text = $0.map { $0 ? "true" : "false" } }
            case .strings(let slot): slot(&request) { text = $0.map { "[" + WireRequest.commaSeparated($0.map(MiniJSON.quoted)) + "]" } }
            }
            if let text { members.append("\"" + name + "\":" + text) }
        }
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
