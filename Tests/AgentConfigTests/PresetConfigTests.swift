@testable import AgentConfig
import AuthCLI
import AuthCore
import Foundation
import XCTest

/// What `authctl accounts add` writes must load with the agent's own loader, with the values the preset meant.
final class PresetConfigTests: XCTestCase {
    func load(_ text: String) throws -> AgentConfiguration { try ConfigLoader.parse(text, path: "/cfg/config.toml") }

    func testEveryPresetLoads() throws {
        let cases: [(String, ProviderPreset, String?)] = [
            ("gmail", try ProviderPreset.named("google"), "GOCSPX-abc\"\\"),
            ("m365", try ProviderPreset.named("microsoft"), nil),
            ("m365-org", try ProviderPreset.named("microsoft", tenant: "organizations"), nil),
            ("outlook", try ProviderPreset.named("microsoft", tenant: "consumers"), nil),
            ("corp", try ProviderPreset.named("microsoft", tenant: "72f988bf-86f1-41af-91ab-2d7cd011db47"), nil),
            ("gh", try ProviderPreset.named("github"), "s3cret"),
            ("gitlab", try ProviderPreset.named("gitlab"), nil),
            ("my.git", try ProviderPreset.named("gitlab", issuer: "https://git.example.com"), nil),
            ("work", try ProviderPreset.named("oidc", issuer: "http://127.0.0.1:8123/o"), nil),
        ]
        var text = "# my config\n[agent]\nlog_level = \"info\"\n"
        for (name, preset, secret) in cases {
            text = ConfigSection.appending(ConfigSection.render(name: name, preset: preset, clientID: "client-\(name)",
                                                                clientSecret: secret), to: text)
        }
        let config = try load(text)
        XCTAssertEqual(config.logLevel, "info", "the existing section is intact")
        XCTAssertEqual(config.accounts.map(\.name), cases.map(\.0))
        for ((name, preset, secret), account) in zip(cases, config.accounts) {
            XCTAssertEqual(account.issuer.absoluteString, preset.issuer, name)
            XCTAssertEqual(account.clientID, "client-\(name)")
            XCTAssertEqual(account.clientSecret?.reveal(), secret, name)
            XCTAssertEqual(account.scopes, preset.scopes, name)
            XCTAssertEqual(account.authorizationEndpoint?.absoluteString, preset.authorizationEndpoint, name)
            XCTAssertEqual(account.tokenEndpoint?.absoluteString, preset.tokenEndpoint, name)
            XCTAssertEqual(account.jwksURI?.absoluteString, preset.jwksURI, name)
            XCTAssertEqual(account.deviceAuthorizationEndpoint?.absoluteString, preset.deviceAuthorizationEndpoint, name)
            XCTAssertEqual(account.extraAuthParams, Dictionary(uniqueKeysWithValues: preset.extraAuthParams), name)
            XCTAssertEqual(account.registeredRedirectURI, "http://127.0.0.1/oauth2/callback/\(name)",
                           "authctl accounts add prints this redirect URI")
            let days = preset.signInLifetime.map { Int($0.period.dropLast())! }
            XCTAssertEqual(account.signInLifetime?.period, days.map { .seconds($0 * 86400) }, name)
            XCTAssertEqual(account.signInLifetime?.kind.rawValue, preset.signInLifetime?.kind, name)
        }
        XCTAssertEqual(config.accounts[1].signInLifetime, SignInLifetime(period: .seconds(90 * 86400), kind: .idle),
                       "Microsoft documents 90 days of inactivity")
        // Removing each again leaves a file that still loads, down to the original.
        var remaining = text
        for (name, _, _) in cases.reversed() {
            remaining = try XCTUnwrap(ConfigSection.removing(name, from: remaining))
            XCTAssertFalse(try load(remaining).accounts.contains { $0.name == name })
        }
        XCTAssertEqual(remaining, "# my config\n[agent]\nlog_level = \"info\"\n")
    }

    func testScopesOverrideAndADuplicateIsRefusedByTheLoader() throws {
        let preset = try ProviderPreset.named("oidc", issuer: "https://login.example.com")
        let section = ConfigSection.render(name: "w", preset: preset, clientID: "c", clientSecret: nil, scopes: ["openid", "api"],
                                           gitHosts: ["gitlab.com", "git.example.com:8443/team"])
        XCTAssertEqual(try load(section).accounts.first?.scopes, ["openid", "api"])
        XCTAssertEqual(try load(section).accounts.first?.gitHosts, ["gitlab.com", "git.example.com:8443/team"])
        XCTAssertThrowsError(try load(ConfigSection.appending(section, to: section)), "a second [accounts.w] is invalid TOML")
    }

    func testGitHostsAreValidated() {
        for bad in ["\"https://gitlab.com\"", "\"oauth2@gitlab.com\"", "\"/group\"", "\"\"", "\"git lab.com\"", "1"] {
            let text = "[accounts.w]\nissuer = \"https://login.example.com\"\nclient_id = \"c\"\ngit_hosts = [\(bad)]\n"
            XCTAssertThrowsError(try load(text), bad) { error in
                XCTAssertEqual((error as? ConfigError)?.line, 4, "\(error)")
                XCTAssertTrue((error as? ConfigError)?.message.contains("git_hosts") ?? false, "\(error)")
            }
        }
    }

    func testScopedTokensIsABooleanAndOffByDefault() throws {
        let base = "[accounts.w]\nissuer = \"https://login.example.com\"\nclient_id = \"c\"\n"
        XCTAssertEqual(try load(base).accounts.first?.scopedTokens, false)
        XCTAssertEqual(try load(base + "scoped_tokens = true\n").accounts.first?.scopedTokens, true)
        XCTAssertThrowsError(try load(base + "scoped_tokens = \"yes\"\n")) { error in
            XCTAssertTrue((error as? ConfigError)?.message.contains("scoped_tokens") ?? false, "\(error)")
        }
    }
}
