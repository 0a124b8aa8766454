@testable import AuthCLI
import XCTest

final class ProviderPresetTests: XCTestCase {
    func testPresetsNeedWhatTheProviderNeeds() throws {
        let google = try ProviderPreset.named("google")
        XCTAssertTrue(google.needsClientSecret)
        XCTAssertEqual(google.extraAuthParams.map { "\($0.0)=\($0.1)" }, ["access_type=offline", "prompt=consent"])
        let github = try ProviderPreset.named("github")
        XCTAssertEqual(github.tokenEndpoint, "https://github.com/login/oauth/access_token")
        XCTAssertEqual(github.deviceAuthorizationEndpoint, "https://github.com/login/device/code", "GitHub offers the device flow")
        XCTAssertFalse(github.scopes.contains("openid"), "GitHub has no OIDC for user sign-in")
        XCTAssertEqual(try ProviderPreset.named("gitlab").issuer, "https://gitlab.com")
        XCTAssertEqual(try ProviderPreset.named("gitlab", issuer: "https://git.example.com").issuer, "https://git.example.com")
        XCTAssertThrowsError(try ProviderPreset.named("oidc"))
        XCTAssertThrowsError(try ProviderPreset.named("google", issuer: "https://x"))
        XCTAssertThrowsError(try ProviderPreset.named("gitlab", tenant: "common"))
        XCTAssertThrowsError(try ProviderPreset.named("yahoo"))
    }

    /// docs/PROVIDERS.md ("Which providers offer DPoP and PAR"): of the presets' providers only Google documents DPoP
    /// (refresh token only), and whether the agent turns it on depends on Google's discovery document, so its note
    /// says how to look and what to set; no other preset claims DPoP or PAR.
    func testOnlyTheGoogleNoteSpeaksOfDPoPAndItSaysHowToCheck() throws {
        let google = try ProviderPreset.named("google").notes.filter { $0.contains("DPoP") }
        XCTAssertEqual(google.count, 1)
        for phrase in ["refresh token", "Bearer", "https://accounts.google.com/.well-known/openid-configuration",
                       "dpop_signing_alg_values_supported", "dpop_refused"] {
            XCTAssertTrue(google.first?.contains(phrase) == true, "the Google DPoP note does not say \(phrase)")
        }
        let others = try [ProviderPreset.named("microsoft"), ProviderPreset.named("microsoft", tenant: "consumers"),
                          ProviderPreset.named("github"), ProviderPreset.named("gitlab"),
                          ProviderPreset.named("oidc", issuer: "https://id.example")]
        for preset in others {
            for note in preset.notes {
                XCTAssertFalse(note.contains("DPoP") || note.contains("PAR") || note.contains("pushed"),
                               "\(preset.name): \(note)")
            }
        }
    }

    func testMicrosoftTenants() throws {
        for tenant in ["common", "organizations"] {
            let preset = try ProviderPreset.named("microsoft", tenant: tenant)
            XCTAssertEqual(preset.authorizationEndpoint, "https://login.microsoftonline.com/\(tenant)/oauth2/v2.0/authorize")
            XCTAssertFalse(preset.scopes.contains("openid"), "the templated issuer cannot verify an ID token")
            XCTAssertTrue(preset.scopes.contains("offline_access"))
        }
        XCTAssertEqual(try ProviderPreset.named("microsoft").issuer, "https://login.microsoftonline.com/common/v2.0")
        let consumers = try ProviderPreset.named("microsoft", tenant: "consumers")
        XCTAssertEqual(consumers.issuer, "https://login.microsoftonline.com/9188040d-6c67-4c5b-b112-36a304b66dad/v2.0")
        XCTAssertTrue(consumers.scopes.contains("openid"))
        let tenant = try ProviderPreset.named("microsoft", tenant: "72F988BF-86F1-41AF-91AB-2D7CD011DB47")
        XCTAssertEqual(tenant.issuer, "https://login.microsoftonline.com/72f988bf-86f1-41af-91ab-2d7cd011db47/v2.0")
        XCTAssertNil(tenant.tokenEndpoint, "a tenant's own discovery document is valid")
        XCTAssertThrowsError(try ProviderPreset.named("microsoft", tenant: "contoso.onmicrosoft.com"))
    }
}
