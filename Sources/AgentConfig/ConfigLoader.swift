import AuthCore
import FoundationEssentials
import ConfigFile
import TOMLKit
import TimeText
import Glibc

/// Reads and validates config.toml. Unknown keys, wrong types and unsafe endpoints are errors: the agent never
/// starts half-configured.
public enum ConfigLoader {
    static let accountKeys: Set<String> = [
        "issuer", "client_id", "client_secret", "scopes", "authorization_endpoint", "token_endpoint",
        "revocation_endpoint", "jwks_uri", "redirect_host", "redirect_port", "redirect_path", "extra_auth_params", "token_endpoint_auth_method",
        "login_timeout", "device_authorization_endpoint", "redirect_uri", "git_hosts", "scoped_tokens",
        "allowed_clients", "confirm", "lock_with_session", "sign_in_lifetime", "sign_in_lifetime_kind", "sign_in_warning", "dpop", "par", "dpop_key",
    ]
    static let agentKeys: Set<String> = ["log_level", "idle_exit", "http_timeout", "notifications", "consent_timeout",
                                         "store", "tpm_tcti"]
    static let logLevels = ["trace", "debug", "info", "notice", "warning", "error", "critical"]

    /// Loads `path`. A missing file is an error only when the path was given explicitly.
    public static func load(path: String, explicit: Bool) throws(ConfigError) -> AgentConfiguration {
        var info = stat()
        guard stat(path, &info) == 0 else {
            if errno == ENOENT && !explicit { return AgentConfiguration(path: path, accounts: [], fileMissing: true) }
            throw ConfigError(file: path, "cannot read the configuration: \(String(cString: strerror(errno)))")
        }
        // Another user who can write the file could point an account at their own server.
        if info.st_mode & (S_IWGRP | S_IWOTH) != 0 {
            throw ConfigError(file: path, "the file is writable by group or others; run `chmod go-w \(path)`")
        }
        if info.st_uid != getuid() {
            throw ConfigError(file: path, "the file belongs to uid \(info.st_uid), not to you (uid \(getuid()))")
        }
        guard let data = FileManager.default.contents(atPath: path), let text = String(data: data, encoding: .utf8) else {
            throw ConfigError(file: path, "cannot read the configuration (is it UTF-8 text?)")
        }
        return try parse(text, path: path)
    }

    public static func parse(_ text: String, path: String) throws(ConfigError) -> AgentConfiguration {
        let table: TOMLTable
        do {
            table = try TOMLTable(string: text)
        } catch let error as TOMLParseError {
            throw ConfigError(file: path, line: error.source.begin.line, "invalid TOML: \(error.description)")
        } catch {
            throw ConfigError(file: path, "invalid TOML")
        }
        let locate = LineLocator(text: text)
        for key in table.keys where key != "accounts" && key != "agent" {
            throw ConfigError(file: path, line: locate.line(section: nil, key: key),
                              "unknown key '\(key)' (top-level tables are [agent] and [accounts.NAME])")
        }
        var logLevel: String?
        var idleExit = AgentConfiguration.defaultIdleExit
        var httpTimeout = AgentConfiguration.defaultHTTPTimeout
        var notifications = true
        var consentTimeout = AgentConfiguration.defaultConsentTimeout
        var store = StoreChoice.auto
        var tpmTCTI = AgentConfiguration.defaultTPMTCTI
        if let agent = table["agent"] {
            guard let agentTable = agent.table else { throw ConfigError(file: path, "'agent' must be a table") }
            for key in agentTable.keys where !agentKeys.contains(key) {
                throw ConfigError(file: path, line: locate.line(section: ["agent"], key: key),
                                  "unknown key '\(key)' in [agent] (known: \(agentKeys.sorted().joined(separator: ", ")))")
            }
            if let level = agentTable["log_level"] {
                guard let value = level.string, logLevels.contains(value) else {
                    throw ConfigError(file: path, line: locate.line(section: ["agent"], key: "log_level"),
                                      "log_level must be one of \(logLevels.joined(separator: ", "))")
                }
                logLevel = value
            }
            if let value = agentTable["idle_exit"] {
                guard let seconds = value.int, (0...(7 * 24 * 3600)).contains(seconds) else {
                    throw ConfigError(file: path, line: locate.line(section: ["agent"], key: "idle_exit"),
                                      "idle_exit must be 0 (never) or a number of seconds up to 604800")
                }
                idleExit = .seconds(seconds)
            }
            if let value = agentTable["http_timeout"] {
                let range = AgentConfiguration.httpTimeoutRange
                guard let seconds = value.int, range.contains(seconds) else {
                    throw ConfigError(file: path, line: locate.line(section: ["agent"], key: "http_timeout"),
                                      "http_timeout must be a number of seconds from \(range.lowerBound) to \(range.upperBound)")
                }
                httpTimeout = .seconds(seconds)
            }
            if let value = agentTable["notifications"] {
                guard let flag = value.bool else {
                    throw ConfigError(file: path, line: locate.line(section: ["agent"], key: "notifications"),
                                      "notifications must be true or false")
                }
                notifications = flag
            }
            if let value = agentTable["consent_timeout"] {
                let range = AgentConfiguration.consentTimeoutRange
                guard let seconds = value.int, range.contains(seconds) else {
                    throw ConfigError(file: path, line: locate.line(section: ["agent"], key: "consent_timeout"),
                                      "consent_timeout must be a number of seconds from \(range.lowerBound) to \(range.upperBound)")
                }
                consentTimeout = .seconds(seconds)
            }
            if let value = agentTable["store"] {
                guard let name = value.string, let choice = StoreChoice(rawValue: name) else {
                    throw ConfigError(file: path, line: locate.line(section: ["agent"], key: "store"),
                                      "store must be \"auto\" (the Secret Service, else memory only), \"secret-service\" or \"memory\"")
                }
                store = choice
            }
            if let value = agentTable["tpm_tcti"] {
                // A TCTI string reaches tpm2-tss as a C string: no NUL, nothing empty, nothing huge.
                guard let text = value.string, !text.isEmpty, text.utf8.count <= 256, !text.contains("\0") else {
                    throw ConfigError(file: path, line: locate.line(section: ["agent"], key: "tpm_tcti"),
                                      "tpm_tcti must be a tpm2-tss TCTI string such as \"device:/dev/tpmrm0\" or \"swtpm:host=127.0.0.1,port=2321\"")
                }
                tpmTCTI = text
            }
        }
        var accounts: [AccountConfig] = []
        if let accountsValue = table["accounts"] {
            guard let accountsTable = accountsValue.table else {
                throw ConfigError(file: path, line: locate.line(section: nil, key: "accounts"), "'accounts' must be a table of [accounts.NAME] sections")
            }
            for name in accountsTable.keys.sorted(by: { locate.sectionLine(["accounts", $0]) ?? 0 < locate.sectionLine(["accounts", $1]) ?? 0 }) {
                guard let section = accountsTable[name]?.table else {
                    throw ConfigError(file: path, line: locate.line(section: ["accounts"], key: name), "accounts.\(name) must be a table")
                }
                let parsed = try account(name: name, section, path: path, locate: locate)
                if let uri = parsed.privateUseRedirect?.uri, let other = accounts.first(where: { $0.privateUseRedirect?.uri == uri }) {
                    throw ConfigError(file: path, line: locate.line(section: ["accounts", name], key: "redirect_uri"),
                        "[accounts.\(name)] 'redirect_uri' is also account '\(other.name)''s: each account needs its own (RFC 8252 §8.10)")
                }
                accounts.append(parsed)
            }
        }
        var configuration = AgentConfiguration(path: path, accounts: accounts, logLevel: logLevel, idleExit: idleExit,
                                               httpTimeout: httpTimeout, notifications: notifications,
                                               consentTimeout: consentTimeout, store: store)
        configuration.tpmTCTI = tpmTCTI
        return configuration
    }

    static func account(name: String, _ table: TOMLTable, path: String, locate: LineLocator) throws(ConfigError) -> AccountConfig {
        let sectionName = "accounts.\(name)"
        let section = ["accounts", name]
        func fail(_ key: String?, _ message: String) -> ConfigError {
            ConfigError(file: path, line: key.map { locate.line(section: section, key: $0) } ?? locate.sectionLine(section),
                        "[\(sectionName)] \(message)")
        }
        guard AccountConfig.isValidName(name) else {
            throw fail(nil, "account names may use letters, digits, '-', '_' and '.' (at most 64, not starting with '-' or '.')")
        }
        for key in table.keys where !accountKeys.contains(key) {
            throw fail(key, "unknown key '\(key)' (known: \(accountKeys.sorted().joined(separator: ", ")))")
        }
        func string(_ key: String) throws(ConfigError) -> String? {
            guard let value = table[key] else { return nil }
            guard let text = value.string else { throw fail(key, "'\(key)' must be a string") }
            return text
        }
        func endpoint(_ key: String) throws(ConfigError) -> URL? {
            guard let text = try string(key) else { return nil }
            switch EndpointPolicy.validate(text) {
            case .success(let url): return url
            case .failure(let rejection): throw fail(key, "'\(key)' \(rejection.reason)")
            }
        }
        guard let issuer = try endpoint("issuer") else {
            throw fail(nil, "'issuer' is missing (the provider's issuer URL, e.g. https://accounts.google.com)")
        }
        guard let clientID = try string("client_id"), !clientID.isEmpty else {
            throw fail(table["client_id"] == nil ? nil : "client_id", "'client_id' is missing or empty (register a client at the provider)")
        }
        let secret = try string("client_secret")
        if let secret, secret.isEmpty { throw fail("client_secret", "'client_secret' is empty; remove the line for a public client") }

        var scopes: [String] = []
        if let value = table["scopes"] {
            guard let array = value.array else { throw fail("scopes", "'scopes' must be an array of strings") }
            for element in array {
                guard let scope = element.string, !scope.isEmpty, !scope.contains(" ") else {
                    throw fail("scopes", "each scope must be a non-empty string without spaces")
                }
                scopes.append(scope)
            }
        }
        var port: UInt16 = 0
        if let value = table["redirect_port"] {
            guard let number = value.int, (0...65535).contains(number) else {
                throw fail("redirect_port", "'redirect_port' must be an integer from 0 (ephemeral) to 65535")
            }
            port = UInt16(number)
        }
        var redirectHost = LoopbackHost.ipv4
        if let text = try string("redirect_host") {
            guard let host = LoopbackHost(rawValue: text) else {
                throw fail("redirect_host", "'redirect_host' must be \"127.0.0.1\" or \"[::1]\" (a loopback literal; never localhost or a wildcard)")
            }
            redirectHost = host
        }
        let redirectPath = try string("redirect_path")
        if let redirectPath {
            let allowed = redirectPath.unicodeScalars.allSatisfy {
                ("a"..."z").contains($0) || ("A"..."Z").contains($0) || ("0"..."9").contains($0) || "/-_.~".unicodeScalars.contains($0)
            }
            guard redirectPath.hasPrefix("/"), redirectPath.count > 1, allowed, !redirectPath.contains("//") else {
                throw fail("redirect_path", "'redirect_path' must be a path like /oauth2/callback/\(name) (letters, digits, / - _ . ~)")
            }
        }
        var privateUse: PrivateUseRedirect?
        if let text = try string("redirect_uri") {
            for key in ["redirect_host", "redirect_port", "redirect_path"] where table[key] != nil {
                throw fail(key, "'\(key)' is for the loopback redirect; an account with 'redirect_uri' (a private-use scheme) has no listener")
            }
            switch PrivateUseRedirect.parse(text) {
            case .success(let redirect): privateUse = redirect
            case .failure(let rejection): throw fail("redirect_uri", "'redirect_uri' \(rejection.reason)")
            }
        }
        var extra: [String: String] = [:]
        if let value = table["extra_auth_params"] {
            guard let params = value.table else { throw fail("extra_auth_params", "'extra_auth_params' must be a table of strings") }
            for key in params.keys {
                guard let text = params[key]?.string else {
                    throw fail("extra_auth_params", "extra_auth_params.\(key) must be a string")
                }
                if AccountConfig.reservedAuthParams.contains(key) {
                    throw fail("extra_auth_params", "extra_auth_params may not set '\(key)': the agent sets it itself")
                }
                extra[key] = text
            }
        }
        var method: AccountConfig.ClientAuthMethod?
        if let text = try string("token_endpoint_auth_method") {
            guard let parsed = AccountConfig.ClientAuthMethod(rawValue: text), parsed != .none else {
                throw fail("token_endpoint_auth_method", "'token_endpoint_auth_method' must be client_secret_basic or client_secret_post")
            }
            guard secret != nil else { throw fail("token_endpoint_auth_method", "'token_endpoint_auth_method' needs a client_secret") }
            method = parsed
        }
        var timeout = Duration.seconds(300)
        if let value = table["login_timeout"] {
            guard let seconds = value.int, (10...3600).contains(seconds) else {
                throw fail("login_timeout", "'login_timeout' must be a number of seconds from 10 to 3600")
            }
            timeout = .seconds(seconds)
        }
        var gitHosts: [String] = []
        if let value = table["git_hosts"] {
            guard let array = value.array else { throw fail("git_hosts", "'git_hosts' must be an array of strings") }
            for element in array {
                guard let entry = element.string, !entry.isEmpty, !entry.hasPrefix("/"), !entry.contains("://"),
                      !entry.contains("@"), !entry.contains(where: { $0.isWhitespace }) else {
                    throw fail("git_hosts", "each git_hosts entry is HOST, HOST:PORT or HOST/PATH-PREFIX (no scheme, user or spaces), e.g. \"gitlab.com/my-group\"")
                }
                gitHosts.append(entry)
            }
        }
        var account = AccountConfig(
            name: name, issuer: issuer, clientID: clientID, clientSecret: secret.map(Secret.init), scopes: scopes,
            authorizationEndpoint: try endpoint("authorization_endpoint"), tokenEndpoint: try endpoint("token_endpoint"),
            revocationEndpoint: try endpoint("revocation_endpoint"), jwksURI: try endpoint("jwks_uri"),
            redirectHost: redirectHost, redirectPort: port, redirectPath: privateUse?.path ?? redirectPath,
            extraAuthParams: extra, clientAuthMethod: method, loginTimeout: timeout,
            deviceAuthorizationEndpoint: try endpoint("device_authorization_endpoint"), privateUseRedirect: privateUse)
        account.gitHosts = gitHosts
        if let value = table["scoped_tokens"] {
            guard let flag = value.bool else { throw fail("scoped_tokens", "'scoped_tokens' must be true or false") }
            account.scopedTokens = flag
        }
        // `"auto"` (when the server offers it), true (required) or false.
        func choice(_ key: String) throws(ConfigError) -> AccountConfig.Choice? {
            guard let value = table[key] else { return nil }
            switch (value.bool, value.string) {
            case (true?, _): return .required
            case (false?, _): return .off
            case (_, "auto"?): return .auto
            default: throw fail(key, "'\(key)' must be \"auto\" (when the server offers it), true (required) or false")
            }
        }
        if let dpop = try choice("dpop") { account.dpop = dpop }
        if let par = try choice("par") { account.par = par }
        if let value = table["dpop_key"] {
            guard let place = value.string.flatMap(AccountConfig.KeyPlace.init(rawValue:)) else {
                throw fail("dpop_key", "'dpop_key' must be \"software\" (the default), \"tpm\" or \"auto\" (the TPM when one answers)")
            }
            account.dpopKey = place
        }
        account.access = try accessPolicy(table, fail: fail)
        try signInLifetime(table, into: &account, fail: fail)
        return account
    }
}

extension ConfigLoader {
    /// `allowed_clients` (exact entries, see ``ClientRule``) and `confirm` (`"first-use"` or `"never"`).
    static func accessPolicy(_ table: TOMLTable, fail: (String?, String) -> ConfigError) throws(ConfigError) -> AccessPolicy {
        var policy = AccessPolicy.open
        if let value = table["allowed_clients"] {
            guard let array = value.array else {
                throw fail("allowed_clients", "'allowed_clients' must be an array of strings, e.g. [\"/usr/bin/git\", \"unit:mbsync.service\"]")
            }
            var rules: [ClientRule] = []
            for element in array {
                guard let text = element.string else { throw fail("allowed_clients", "each allowed_clients entry must be a string") }
                switch ClientRule.parse(text) {
                case .success(let rule): rules.append(rule)
                case .failure(let rejection): throw fail("allowed_clients", "allowed_clients: \(rejection.reason)")
                }
            }
            policy.allowedClients = rules
        }
        if let value = table["confirm"] {
            guard let text = value.string, let confirm = AccessPolicy.Confirm(rawValue: text) else {
                throw fail("confirm", "'confirm' must be \"first-use\" (ask before a program's first token) or \"never\"")
            }
            policy.confirm = confirm
        }
        if let value = table["lock_with_session"] {
            guard let flag = value.bool else { throw fail("lock_with_session", "'lock_with_session' must be true or false") }
            policy.lockWithSession = flag
        }
        return policy
    }
}

extension ConfigLoader {
    /// `sign_in_lifetime` ("90d", or seconds), `sign_in_lifetime_kind` ("fixed" from the sign-in, or "idle": starts
    /// again with each refresh) and `sign_in_warning` (how long before the end to warn; default 3 days).
    static func signInLifetime(_ table: TOMLTable, into account: inout AccountConfig,
                               fail: (String?, String) -> ConfigError) throws(ConfigError) {
        let kindText = table["sign_in_lifetime_kind"]
        if let value = table["sign_in_lifetime"] {
            guard let period = duration(value), period > .zero else {
                throw fail("sign_in_lifetime", "'sign_in_lifetime' must be a duration such as \"90d\", \"12h\" or a number of seconds")
            }
            var kind = SignInLifetime.Kind.fixed
            if let kindText {
                guard let text = kindText.string, let parsed = SignInLifetime.Kind(rawValue: text) else {
                    throw fail("sign_in_lifetime_kind", "'sign_in_lifetime_kind' must be \"fixed\" (from the sign-in) or \"idle\" (from the last refresh)")
                }
                kind = parsed
            }
            account.signInLifetime = SignInLifetime(period: period, kind: kind)
        } else if kindText != nil {
            throw fail("sign_in_lifetime_kind", "'sign_in_lifetime_kind' goes with 'sign_in_lifetime'")
        }
        if let value = table["sign_in_warning"] {
            guard let warning = duration(value), warning >= .zero else {
                throw fail("sign_in_warning", "'sign_in_warning' must be a duration such as \"3d\" or a number of seconds (0: no warning)")
            }
            account.signInWarning = warning
        }
    }

    /// A number of seconds, or a string of digits followed by s, m, h or d ("90d", read by ``DurationText``; a string
    /// must name its unit). At most ten years.
    static func duration(_ value: TOMLValueConvertible) -> Duration? {
        var seconds: Int?
        if let number = value.int {
            seconds = number
        } else if let text = value.string, text.last?.isLetter == true {
            seconds = DurationText.seconds(text)
        }
        guard let seconds, seconds >= 0, seconds <= 10 * 366 * 86400 else { return nil }
        return .seconds(seconds)
    }
}

/// TOMLKit reports lines for syntax errors only; this finds where a section or key was written, for messages. Headers
/// are read by ``TOMLHeader``, as authctl reads them (quoted names with dots included).
struct LineLocator {
    let lines: [Substring]
    init(text: String) { lines = text.split(separator: "\n", omittingEmptySubsequences: false) }

    func sectionLine(_ section: [String]) -> Int? {
        lines.firstIndex { TOMLHeader.parts(of: $0) == section }.map { $0 + 1 }
    }

    func line(section: [String]?, key: String) -> Int? {
        var start = 0
        if let section {
            guard let at = lines.firstIndex(where: { TOMLHeader.parts(of: $0) == section }) else { return nil }
            start = at + 1
        }
        for index in start..<lines.count {
            let line = lines[index].trimmingBlanks
            if line.hasPrefix("[") { break }
            if line.hasPrefix(key), line.dropFirst(key.count).trimmingBlanks.hasPrefix("=") {
                return index + 1
            }
        }
        // The key may be a sub-table of its own: [section.key].
        return sectionLine((section ?? []) + [key])
    }
}
