@testable import AgentConfig
import AuthCore
import Foundation
import XCTest

final class ConfigLoaderTests: XCTestCase {
    func parse(_ text: String) throws -> AgentConfiguration { try ConfigLoader.parse(text, path: "/cfg/config.toml") }

    func expectError(_ text: String, line: Int?, contains fragment: String, file: StaticString = #filePath, l: UInt = #line) {
        XCTAssertThrowsError(try parse(text), file: file, line: l) { error in
            guard let error = error as? ConfigError else { return XCTFail("not a ConfigError: \(error)", file: file, line: l) }
            XCTAssertEqual(error.file, "/cfg/config.toml", file: file, line: l)
            XCTAssertEqual(error.line, line, "\(error)", file: file, line: l)
            XCTAssertTrue(error.message.contains(fragment), "\(error.message) lacks '\(fragment)'", file: file, line: l)
        }
    }

    func testFullAccount() throws {
        let config = try parse("""
        [agent]
        log_level = "debug"

        [accounts.work]
        issuer = "https://login.example.com"
        client_id = "my-public-client"
        client_secret = "shh"
        scopes = ["openid", "email", "offline_access"]
        token_endpoint = "https://login.example.com/token"
        redirect_port = 8400
        redirect_path = "/cb/work"
        extra_auth_params = { access_type = "offline", prompt = "consent" }
        login_timeout = 120

        [accounts.personal]
        issuer = "http://127.0.0.1:9000/o"
        client_id = "c2"
        """)
        XCTAssertEqual(config.logLevel, "debug")
        XCTAssertEqual(config.idleExit, AgentConfiguration.defaultIdleExit, "idle_exit defaults to an hour")
        XCTAssertEqual(config.accounts.map(\.name), ["work", "personal"], "accounts keep file order")
        let work = config.accounts[0]
        XCTAssertEqual(work.issuer.absoluteString, "https://login.example.com")
        XCTAssertEqual(work.clientSecret?.reveal(), "shh")
        XCTAssertEqual(work.scopes, ["openid", "email", "offline_access"])
        XCTAssertEqual(work.tokenEndpoint?.absoluteString, "https://login.example.com/token")
        XCTAssertEqual(work.redirectPort, 8400)
        XCTAssertEqual(work.registeredRedirectURI, "http://127.0.0.1:8400/cb/work")
        XCTAssertEqual(work.extraAuthParams, ["access_type": "offline", "prompt": "consent"])
        XCTAssertEqual(work.loginTimeout, .seconds(120))
        let personal = config.accounts[1]
        XCTAssertEqual(personal.redirectPath, "/oauth2/callback/personal")
        XCTAssertEqual(personal.registeredRedirectURI, "http://127.0.0.1/oauth2/callback/personal")
        XCTAssertNil(personal.clientSecret)
        XCTAssertEqual(personal.loginTimeout, .seconds(300))
    }

    /// Headers are read as authctl reads them (one parser, TOMLHeader): literal quotes, dots inside quotes.
    func testErrorsPointAtQuotedHeaders() {
        expectError("[accounts.'work']\nissuer = \"https://x.example\"\nclient_id = \"c\"\ncolour = 1\n",
                    line: 4, contains: "unknown key 'colour'")
        expectError("[agent]\n\n[accounts.\"a.b\"]\nissuer = \"https://x.example\"\nclient_id = \"c\"\nredirect_path = \"cb\"\n",
                    line: 6, contains: "path")
        XCTAssertEqual(LineLocator(text: "x = 1\n[accounts.\"a.b\"]\n[accounts.a.b]\n").sectionLine(["accounts", "a", "b"]), 3,
                       "a dotted name in quotes is one part; the bare dotted header is three")
    }

    func testErrorsNameFileLineAndFix() {
        expectError("[accounts.work]\nissuer = \"https://x.example\"\nclient_id = \"c\"\nclient_sceret = \"s\"\n",
                    line: 4, contains: "unknown key 'client_sceret'")
        expectError("[accounts.work]\nissuer = \"https://x.example\"\n", line: 1, contains: "'client_id' is missing")
        expectError("[accounts.work]\nissuer = \"http://x.example\"\nclient_id = \"c\"\n", line: 2, contains: "https")
        expectError("[accounts.work]\nissuer = \"https://x.example\"\nclient_id = \"c\"\nrevocation_endpoint = \"file:///etc/passwd\"\n",
                    line: 4, contains: "https")
        expectError("[accounts.work]\nissuer = \"--help\"\nclient_id = \"c\"\n", line: 2, contains: "'-'")
        expectError("[accounts.work]\nissuer = \"https://x.example\"\nclient_id = \"c\"\nscopes = \"openid\"\n", line: 4, contains: "array")
        expectError("[accounts.work]\nissuer = \"https://x.example\"\nclient_id = \"c\"\nredirect_port = 70000\n", line: 4, contains: "65535")
        expectError("[accounts.work]\nissuer = \"https://x.example\"\nclient_id = \"c\"\nredirect_path = \"cb\"\n", line: 4, contains: "path")
        expectError("[accounts.work]\nissuer = \"https://x.example\"\nclient_id = \"c\"\nextra_auth_params = { state = \"x\" }\n",
                    line: 4, contains: "'state'")
        // A response that would never reach the loopback listener's query: refused here, not a sign-in timing out.
        expectError("[accounts.work]\nissuer = \"https://x.example\"\nclient_id = \"c\"\nextra_auth_params = { response_mode = \"fragment\" }\n",
                    line: 4, contains: "'response_mode'")
        expectError("[accounts.work]\nissuer = \"https://x.example\"\nclient_id = \"c\"\n[accounts.work.nested]\n", line: 4, contains: "unknown key 'nested'")
        expectError("[accounts.work]\nissuer = \"https://x.example\"\nclient_id = [\n", line: 3, contains: "invalid TOML")
        expectError("[accounts.\"bad name\"]\nissuer = \"https://x.example\"\nclient_id = \"c\"\n", line: 1, contains: "account names")
        expectError("surprise = 1\n", line: 1, contains: "unknown key 'surprise'")
        expectError("[agent]\nlog_level = \"loud\"\n", line: 2, contains: "log_level")
        expectError("[agent]\nidle_exit = -5\n", line: 2, contains: "idle_exit must be 0 (never)")
        expectError("[agent]\nidle_exit = \"1h\"\n", line: 2, contains: "idle_exit")
    }

    func testIdleExit() throws {
        XCTAssertEqual(try parse("[agent]\nidle_exit = 0\n").idleExit, .zero)
        XCTAssertEqual(try parse("[agent]\nidle_exit = 600\n").idleExit, .seconds(600))
        XCTAssertEqual(try parse("").idleExit, .seconds(3600))
    }

    func testNotifications() throws {
        XCTAssertTrue(try parse("").notifications, "desktop notifications are on by default")
        XCTAssertFalse(try parse("[agent]\nnotifications = false\n").notifications)
        expectError("[agent]\nnotifications = \"no\"\n", line: 2, contains: "notifications must be true or false")
    }

    func testStore() throws {
        XCTAssertEqual(try parse("").store, .auto, "the Secret Service when one answers, else memory only")
        XCTAssertEqual(try parse("[agent]\nstore = \"memory\"\n").store, .memory)
        XCTAssertEqual(try parse("[agent]\nstore = \"secret-service\"\n").store, .secretService)
        expectError("[agent]\nstore = \"file\"\n", line: 2, contains: "store must be \"auto\"")
        expectError("[agent]\nstore = true\n", line: 2, contains: "\"secret-service\" or \"memory\"")
    }

    func testDPoP() throws {
        let base = "[accounts.work]\nissuer = \"https://x.example\"\nclient_id = \"c\"\n"
        XCTAssertEqual(try parse(base).accounts[0].dpop, .auto, "used when the server offers it")
        XCTAssertEqual(try parse(base + "dpop = true\n").accounts[0].dpop, .required)
        XCTAssertEqual(try parse(base + "dpop = false\n").accounts[0].dpop, .off)
        XCTAssertEqual(try parse(base + "dpop = \"auto\"\n").accounts[0].dpop, .auto)
        expectError(base + "dpop = \"yes\"\n", line: 4, contains: "'dpop' must be \"auto\"")
        XCTAssertEqual(try parse(base).accounts[0].par, .auto)
        XCTAssertEqual(try parse(base + "par = true\n").accounts[0].par, .required)
        XCTAssertEqual(try parse(base + "par = false\n").accounts[0].par, .off)
        expectError(base + "par = 1\n", line: 4, contains: "'par' must be \"auto\"")
    }

    func testWhereTheDPoPKeyIsAndWhichTPM() throws {
        let base = "[accounts.work]\nissuer = \"https://x.example\"\nclient_id = \"c\"\n"
        XCTAssertEqual(try parse(base).accounts[0].dpopKey, .software, "today's behaviour unless asked")
        XCTAssertEqual(try parse(base + "dpop_key = \"tpm\"\n").accounts[0].dpopKey, .tpm)
        XCTAssertEqual(try parse(base + "dpop_key = \"auto\"\n").accounts[0].dpopKey, .auto)
        expectError(base + "dpop_key = \"hsm\"\n", line: 4, contains: "'dpop_key' must be \"software\"")
        expectError(base + "dpop_key = true\n", line: 4, contains: "\"tpm\" or \"auto\"")
        XCTAssertEqual(try parse("").tpmTCTI, "device:/dev/tpmrm0", "the kernel's resource manager")
        XCTAssertEqual(try parse("[agent]\ntpm_tcti = \"swtpm:host=127.0.0.1,port=2321\"\n").tpmTCTI,
                       "swtpm:host=127.0.0.1,port=2321")
        expectError("[agent]\ntpm_tcti = \"\"\n", line: 2, contains: "tpm_tcti must be a tpm2-tss TCTI string")
        expectError("[agent]\ntpm_tcti = 2321\n", line: 2, contains: "tpm_tcti must be")
    }

    func testSignInLifetime() throws {
        let base = "[accounts.work]\nissuer = \"https://x.example\"\nclient_id = \"c\"\n"
        let none = try parse(base).accounts[0]
        XCTAssertNil(none.signInLifetime, "unknown unless stated")
        XCTAssertEqual(none.signInWarning, .seconds(3 * 86400), "three days' warning by default")
        let idle = try parse(base + "sign_in_lifetime = \"90d\"\nsign_in_lifetime_kind = \"idle\"\nsign_in_warning = \"5d\"\n")
        XCTAssertEqual(idle.accounts[0].signInLifetime, SignInLifetime(period: .seconds(90 * 86400), kind: .idle))
        XCTAssertEqual(idle.accounts[0].signInWarning, .seconds(5 * 86400))
        XCTAssertEqual(try parse(base + "sign_in_lifetime = 3600\n").accounts[0].signInLifetime,
                       SignInLifetime(period: .seconds(3600), kind: .fixed), "seconds, fixed by default")
        XCTAssertEqual(try parse(base + "sign_in_lifetime = \"12h\"\n").accounts[0].signInLifetime?.period, .seconds(12 * 3600))
        expectError(base + "sign_in_lifetime = \"90 days\"\n", line: 4, contains: "sign_in_lifetime' must be a duration")
        expectError(base + "sign_in_lifetime = \"0d\"\n", line: 4, contains: "sign_in_lifetime' must be a duration")
        // A count whose seconds overflow Int is a bad value, not a crash.
        expectError(base + "sign_in_lifetime = \"99999999999999999d\"\n", line: 4, contains: "sign_in_lifetime' must be a duration")
        expectError(base + "sign_in_warning = \"99999999999999999h\"\n", line: 4, contains: "sign_in_warning' must be a duration")
        expectError(base + "sign_in_lifetime = \"7d\"\nsign_in_lifetime_kind = \"sliding\"\n", line: 5, contains: "\"idle\"")
        expectError(base + "sign_in_lifetime_kind = \"idle\"\n", line: 4, contains: "goes with 'sign_in_lifetime'")
        expectError(base + "sign_in_warning = \"soon\"\n", line: 4, contains: "sign_in_warning' must be a duration")
    }

    func testDeviceEndpointAndPrivateUseRedirect() throws {
        let base = "[accounts.work]\nissuer = \"https://x.example\"\nclient_id = \"c\"\n"
        let device = try parse(base + "device_authorization_endpoint = \"https://x.example/device\"\n")
        XCTAssertEqual(device.accounts[0].deviceAuthorizationEndpoint?.absoluteString, "https://x.example/device")
        expectError(base + "device_authorization_endpoint = \"http://x.example/device\"\n", line: 4, contains: "https")

        let scheme = try parse(base + "redirect_uri = \"com.example.app:/oauth2/callback/work\"\n")
        XCTAssertEqual(scheme.accounts[0].privateUseRedirect?.scheme, "com.example.app")
        XCTAssertEqual(scheme.accounts[0].registeredRedirectURI, "com.example.app:/oauth2/callback/work")
        XCTAssertEqual(scheme.accounts[0].redirectPath, "/oauth2/callback/work")
        expectError(base + "redirect_uri = \"myapp:/cb\"\n", line: 4, contains: "reverse domain")
        expectError(base + "redirect_uri = \"com.example.app://cb\"\n", line: 4, contains: "one slash")
        expectError(base + "redirect_uri = \"https://x.example/cb\"\n", line: 4, contains: "http(s)")
        expectError(base + "redirect_uri = \"com.example.app:/cb\"\nredirect_port = 8400\n", line: 5, contains: "no listener")
        let other = "[accounts.other]\nissuer = \"https://x.example\"\nclient_id = \"c\"\nredirect_uri = \"com.example.app:/cb\"\n"
        expectError(base + "redirect_uri = \"com.example.app:/cb\"\n" + other, line: 8, contains: "its own")
    }

    func testRedirectHostAndJWKSURI() throws {
        let base = "[accounts.work]\nissuer = \"https://x.example\"\nclient_id = \"c\"\n"
        let v4 = try parse(base)
        XCTAssertEqual(v4.accounts[0].redirectHost, .ipv4, "127.0.0.1 unless configured")
        XCTAssertNil(v4.accounts[0].jwksURI)
        let v6 = try parse(base + "redirect_host = \"[::1]\"\nredirect_port = 8400\njwks_uri = \"https://x.example/keys\"\n")
        XCTAssertEqual(v6.accounts[0].redirectHost, .ipv6)
        XCTAssertEqual(v6.accounts[0].registeredRedirectURI, "http://[::1]:8400/oauth2/callback/work")
        XCTAssertEqual(v6.accounts[0].jwksURI?.absoluteString, "https://x.example/keys")
        XCTAssertEqual(try parse(base + "redirect_host = \"127.0.0.1\"\n").accounts[0].redirectHost, .ipv4)
        for bad in ["localhost", "0.0.0.0", "::", "[::]", "::1", "127.0.0.2", "[::1]:8400", ""] {
            expectError(base + "redirect_host = \"\(bad)\"\n", line: 4, contains: "loopback literal")
        }
        expectError(base + "redirect_host = 1\n", line: 4, contains: "must be a string")
        expectError(base + "jwks_uri = \"http://x.example/keys\"\n", line: 4, contains: "https")
    }

    func testFileChecks() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("cfg-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let path = dir.appendingPathComponent("config.toml").path
        XCTAssertEqual(try ConfigLoader.load(path: path, explicit: false).fileMissing, true)
        XCTAssertThrowsError(try ConfigLoader.load(path: path, explicit: true))
        try "[accounts.a]\nissuer = \"https://x.example\"\nclient_id = \"c\"\n".write(toFile: path, atomically: true, encoding: .utf8)
        chmod(path, 0o600)
        XCTAssertEqual(try ConfigLoader.load(path: path, explicit: true).accounts.count, 1)
        chmod(path, 0o666)
        XCTAssertThrowsError(try ConfigLoader.load(path: path, explicit: true)) { error in
            XCTAssertTrue("\(error)".contains("writable by group or others"))
        }
    }

    func testHTTPTimeout() throws {
        let account = "\n[accounts.work]\nissuer = \"https://login.example.com\"\nclient_id = \"c\"\n"
        XCTAssertEqual(try parse(account).httpTimeout, .seconds(30), "the default")
        XCTAssertEqual(try parse("[agent]\nhttp_timeout = 5\n" + account).httpTimeout, .seconds(5))
        for bad in ["0", "301", "-1", "\"10\"", "1.5"] {
            expectError("[agent]\nhttp_timeout = \(bad)\n" + account, line: 2, contains: "http_timeout must be a number of seconds from 1 to 300")
        }
    }

    func testDefaultPathOrder() {
        XCTAssertEqual(AgentConfiguration.defaultPath(explicit: "/a.toml", environment: ["AUTH_AGENT_CONFIG": "/b.toml"])?.path, "/a.toml")
        XCTAssertEqual(AgentConfiguration.defaultPath(explicit: nil, environment: ["AUTH_AGENT_CONFIG": "/b.toml", "HOME": "/h"])?.path, "/b.toml")
        XCTAssertEqual(AgentConfiguration.defaultPath(explicit: nil, environment: ["XDG_CONFIG_HOME": "/x", "HOME": "/h"])?.path,
                       "/x/auth-agent/config.toml")
        XCTAssertEqual(AgentConfiguration.defaultPath(explicit: nil, environment: ["HOME": "/h"])?.path, "/h/.config/auth-agent/config.toml")
    }
}

final class AccessConfigTests: XCTestCase {
    let base = "[accounts.work]\nissuer = \"https://x.example\"\nclient_id = \"c\"\n"
    func parse(_ text: String) throws -> AgentConfiguration { try ConfigLoader.parse(text, path: "/cfg/config.toml") }

    func testAllowedClientsAndConfirm() throws {
        let open = try parse(base)
        XCTAssertEqual(open.accounts[0].access, .open)
        XCTAssertEqual(open.consentTimeout, .seconds(60))
        let config = try parse("[agent]\nconsent_timeout = 5\n" + base + """
        allowed_clients = ["/usr/bin/git", "unit:mbsync.service", "flatpak:org.gnome.Evolution"]
        confirm = "first-use"
        """)
        XCTAssertEqual(config.consentTimeout, .seconds(5))
        XCTAssertEqual(config.accounts[0].access, AccessPolicy(
            allowedClients: [.path("/usr/bin/git"), .unit("mbsync.service"), .flatpak("org.gnome.Evolution")], confirm: .firstUse))
    }

    func testBadEntriesNameTheLineAndTheRule() {
        for (text, fragment) in [("allowed_clients = [\"/usr/bin/*\"]", "glob"),
                                 ("allowed_clients = [\"git\"]", "neither an absolute path"),
                                 ("allowed_clients = \"/usr/bin/git\"", "must be an array"),
                                 ("allowed_clients = [1]", "must be a string"),
                                 ("confirm = \"always\"", "first-use")] {
            XCTAssertThrowsError(try parse(base + text + "\n"), text) { error in
                let error = error as? ConfigError
                XCTAssertEqual(error?.line, 4, text)
                XCTAssertTrue(error?.message.contains(fragment) == true, "\(String(describing: error?.message)) lacks \(fragment)")
            }
        }
        XCTAssertThrowsError(try parse("[agent]\nconsent_timeout = 0\n" + base))
        XCTAssertThrowsError(try parse("[agent]\nconsent_timeout = 601\n" + base))
    }
}
