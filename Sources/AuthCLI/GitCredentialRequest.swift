/// One request from git to a credential helper (gitcredentials(7), git-credential(1) "INPUT/OUTPUT FORMAT"):
/// `key=value` lines, ending at a blank line or at the end of the input.
///
/// Only the attributes authctl acts on are kept; every other attribute (`wwwauth[]`, `capability[]`, ... ) is
/// ignored, as the protocol asks of helpers, so newer gits keep working.
public struct GitCredentialRequest: Sendable, Equatable {
    public var `protocol`: String?
    public var host: String?
    public var path: String?
    public var username: String?

    public init(protocol: String? = nil, host: String? = nil, path: String? = nil, username: String? = nil) {
        self.protocol = `protocol`
        self.host = host
        self.path = path
        self.username = username
    }

    /// No line may be longer than this many bytes (newline excluded); git's own attributes are far shorter.
    public static let maxLineBytes = 64 * 1024
    /// The whole request may not be longer than this many bytes.
    public static let maxInputBytes = 1024 * 1024

    /// Parses the first request in `input` (everything up to the first blank line, or all of it).
    /// Later attributes replace earlier ones with the same key, as in git. A trailing `\r` is dropped from each
    /// line (git's reader does the same).
    public static func parse(_ input: some Collection<UInt8>) throws(GitCredentialInputError) -> GitCredentialRequest {
        let bytes = Array(input)
        guard bytes.count <= maxInputBytes else { throw .inputTooLarge(limit: maxInputBytes) }
        var request = GitCredentialRequest()
        var lineNumber = 0
        var start = 0
        while start < bytes.count {
            let end = bytes[start...].firstIndex(of: UInt8(ascii: "\n")) ?? bytes.count
            lineNumber += 1
            guard end - start <= maxLineBytes else { throw .lineTooLong(line: lineNumber, limit: maxLineBytes) }
            var line = bytes[start..<end]
            if line.last == UInt8(ascii: "\r") { line = line.dropLast() }
            start = end + 1
            if line.isEmpty { break }
            guard !line.contains(0) else { throw .malformedLine(line: lineNumber, reason: "it contains a NUL byte") }
            guard let equals = line.firstIndex(of: UInt8(ascii: "=")) else {
                throw .malformedLine(line: lineNumber, reason: "it is not key=value")
            }
            guard equals > line.startIndex else { throw .malformedLine(line: lineNumber, reason: "the key is empty") }
            // Only the attributes read here must be UTF-8: an attribute this helper ignores (git 2.41's `wwwauth[]`
            // carries a server's WWW-Authenticate header as it came) is skipped whatever its bytes.
            guard let key = String(validating: line[..<equals], as: UTF8.self) else { continue }
            switch key {
            case "protocol", "host", "path", "username": break
            default: continue
            }
            guard let value = String(validating: line[(equals + 1)...], as: UTF8.self) else {
                throw .malformedLine(line: lineNumber, reason: "it is not UTF-8")
            }
            switch key {
            case "protocol": request.protocol = value
            case "host": request.host = value
            case "path": request.path = value
            default: request.username = value
            }
        }
        return request
    }

    /// True once `buffer` holds a whole request (a blank line), so a reader can stop before the end of input.
    public static func isComplete(_ buffer: [UInt8]) -> Bool {
        if buffer.first == UInt8(ascii: "\n") { return true }
        var previous: UInt8 = 0
        var beforePrevious: UInt8 = 0
        for byte in buffer {
            if byte == UInt8(ascii: "\n") && (previous == UInt8(ascii: "\n") || (previous == UInt8(ascii: "\r") && beforePrevious == UInt8(ascii: "\n"))) {
                return true
            }
            beforePrevious = previous
            previous = byte
        }
        return false
    }

    /// Why a token must not be sent for this request, or nil if it may.
    ///
    /// A bearer token is as good as a password, so it goes only over `https`; plain `http` only to a loopback
    /// literal (local test servers), the same rule the agent applies to endpoints. Without a protocol git gave us
    /// nothing to judge, so the answer is no.
    public var refusal: String? {
        guard let scheme = self.protocol?.lowercased(), !scheme.isEmpty else {
            return "git did not say which protocol the credential is for"
        }
        switch scheme {
        case "https": return nil
        case "http":
            if let host, Self.isLoopbackLiteral(host) { return nil }
            return "refusing to send an access token over plain http to \(host ?? "an unnamed host") (only https, or http to 127.0.0.1 or [::1])"
        default:
            return "authctl only answers for https (protocol was '\(scheme)')"
        }
    }

    /// `127.0.0.1` or `[::1]`, with or without a port (git's `host` attribute carries the port).
    static func isLoopbackLiteral(_ host: String) -> Bool {
        let name: Substring
        if host.hasPrefix("[") {
            guard let close = host.firstIndex(of: "]") else { return false }
            name = host[host.startIndex...close]
            let rest = host[host.index(after: close)...]
            guard rest.isEmpty || isPortSuffix(rest) else { return false }
        } else if let colon = host.firstIndex(of: ":") {
            name = host[..<colon]
            guard isPortSuffix(host[colon...]) else { return false }
        } else {
            name = host[...]
        }
        return name == "127.0.0.1" || name == "[::1]"
    }

    private static func isPortSuffix(_ text: Substring) -> Bool {
        text.count >= 2 && text.first == ":" && text.dropFirst().allSatisfy { $0.isASCII && $0.isNumber }
    }
}

/// Why git's input could not be read as a credential request.
public enum GitCredentialInputError: Error, Equatable, CustomStringConvertible {
    case lineTooLong(line: Int, limit: Int)
    case inputTooLarge(limit: Int)
    case malformedLine(line: Int, reason: String)

    public var description: String {
        switch self {
        case .lineTooLong(let line, let limit): return "credential input line \(line) is longer than \(limit) bytes"
        case .inputTooLarge(let limit): return "the credential input is longer than \(limit) bytes"
        case .malformedLine(let line, let reason): return "credential input line \(line) is malformed: \(reason)"
        }
    }
}
