/// What `authctl accounts add --preset` writes for a provider: endpoints, scopes and quirks, as plain data.
/// docs/PROVIDERS.md ("Providers") explains how to register a client at each.
public struct ProviderPreset: Sendable, Equatable {
    public var name: String
    /// nil: the user must give `--issuer`.
    public var issuer: String?
    public var authorizationEndpoint: String?
    public var tokenEndpoint: String?
    public var jwksURI: String?
    /// RFC 8628: lets `authctl login --device` (and SSH/headless sessions) sign in where discovery does not say.
    public var deviceAuthorizationEndpoint: String? = nil
    public var scopes: [String]
    public var extraAuthParams: [(String, String)]
    /// The provider refuses installed apps without their (non-confidential) client secret.
    public var needsClientSecret: Bool
    /// Printed after the account is added: what else the user must know.
    public var notes: [String]
    /// The provider's documented sign-in lifetime (`sign_in_lifetime`, `sign_in_lifetime_kind`), where it documents
    /// one and does not send `refresh_token_expires_in`; docs/PROVIDERS.md cites the source.
    public var signInLifetime: (period: String, kind: String)? = nil

    public static func == (a: ProviderPreset, b: ProviderPreset) -> Bool {
        a.name == b.name && a.issuer == b.issuer && a.authorizationEndpoint == b.authorizationEndpoint
            && a.tokenEndpoint == b.tokenEndpoint && a.jwksURI == b.jwksURI
            && a.deviceAuthorizationEndpoint == b.deviceAuthorizationEndpoint && a.scopes == b.scopes
            && a.extraAuthParams.map { [$0.0, $0.1] } == b.extraAuthParams.map { [$0.0, $0.1] }
            && a.needsClientSecret == b.needsClientSecret
            && a.signInLifetime.map { [$0.period, $0.kind] } == b.signInLifetime.map { [$0.period, $0.kind] }
    }

    public static let names = ["google", "microsoft", "github", "gitlab", "oidc"]

    /// Microsoft's tenant that all personal accounts (outlook.com, hotmail.com, ...) belong to: ID tokens for the
    /// `consumers` endpoints carry this issuer.
    public static let microsoftConsumersTenant = "9188040d-6c67-4c5b-b112-36a304b66dad"

    public enum Failure: Error, Equatable, CustomStringConvertible {
        case unknownPreset(String)
        case issuerRequired(String)
        case issuerNotAllowed(String)
        case badTenant(String)
        case tenantNotAllowed(String)

        public var description: String {
            switch self {
            case .unknownPreset(let name): return "unknown preset '\(name)' (known: \(ProviderPreset.names.joined(separator: ", ")))"
            case .issuerRequired(let name): return "the '\(name)' preset needs --issuer URL"
            case .issuerNotAllowed(let name): return "the '\(name)' preset has a fixed issuer; leave out --issuer"
            case .badTenant(let tenant):
                return "'\(tenant)' is not a Microsoft tenant: use common, organizations, consumers or your tenant ID (a GUID, not a domain name)"
            case .tenantNotAllowed(let name): return "--tenant only goes with the 'microsoft' preset, not '\(name)'"
            }
        }
    }

    /// The preset `name`, completed with the user's `--issuer` (GitLab self-hosted, any OIDC issuer) and `--tenant`
    /// (Microsoft; default `common`).
    public static func named(_ name: String, issuer: String? = nil, tenant: String? = nil) throws(Failure) -> ProviderPreset {
        if tenant != nil && name != "microsoft" { throw .tenantNotAllowed(name) }
        switch name {
        case "google":
            if issuer != nil { throw .issuerNotAllowed(name) }
            return ProviderPreset(
                name: name, issuer: "https://accounts.google.com", scopes: ["openid", "email"],
                extraAuthParams: [("access_type", "offline"), ("prompt", "consent")], needsClientSecret: true,
                notes: ["Google issues a refresh token only with access_type=offline and prompt=consent (written for you).",
                        "Add the API scopes you need with --scope, e.g. --scope https://mail.google.com/ for IMAP/SMTP.",
                        "A sign-in unused for six months ends; while the app's consent screen is in 'Testing' it ends after 7 days: then set sign_in_lifetime = \"7d\" and sign_in_lifetime_kind = \"fixed\".",
                        Self.googleDPoPNote],
                signInLifetime: ("180d", "idle"))
        case "microsoft":
            if issuer != nil { throw .issuerNotAllowed(name) }
            return try microsoft(tenant: tenant ?? "common")
        case "github":
            if issuer != nil { throw .issuerNotAllowed(name) }
            return ProviderPreset(
                name: name, issuer: "https://github.com", authorizationEndpoint: "https://github.com/login/oauth/authorize",
                tokenEndpoint: "https://github.com/login/oauth/access_token",
                deviceAuthorizationEndpoint: "https://github.com/login/device/code", scopes: [], extraAuthParams: [],
                needsClientSecret: true,
                notes: ["GitHub has no OIDC discovery for user sign-in: the endpoints are written explicitly.",
                        "Device sign-in (authctl login --device, and the default over SSH) works once 'Enable Device Flow' is ticked in the app's settings.",
                        "A GitHub App (client ID Iv1...) with expiring user tokens gets refresh tokens and needs no scopes; an OAuth App needs --scope repo (and its tokens do not expire)."])
        case "gitlab":
            return ProviderPreset(
                name: name, issuer: issuer ?? "https://gitlab.com",
                scopes: ["openid", "email", "read_repository", "write_repository"], extraAuthParams: [],
                needsClientSecret: false,
                notes: ["Create the application as non-confidential; for the API add --scope api (or read_api)."])
        case "oidc":
            guard let issuer else { throw .issuerRequired(name) }
            return ProviderPreset(name: name, issuer: issuer, scopes: ["openid", "email", "offline_access"],
                                  extraAuthParams: [], needsClientSecret: false, notes: [])
        default:
            throw .unknownPreset(name)
        }
    }

    /// Microsoft identity platform v2.0. The `common` and `organizations` discovery documents name the templated
    /// issuer `https://login.microsoftonline.com/{tenantid}/v2.0`, and their ID tokens carry the user's own tenant;
    /// the agent checks the issuer exactly, so these tenants get explicit endpoints and no `openid` scope (access and
    /// refresh tokens for mail and APIs work; for an ID token use your tenant ID). `consumers` tokens all carry the
    /// consumers tenant's issuer, and a tenant ID's discovery document names itself, so those keep `openid`.
    static func microsoft(tenant: String) throws(Failure) -> ProviderPreset {
        let mail = ["offline_access", "https://outlook.office.com/IMAP.AccessAsUser.All", "https://outlook.office.com/SMTP.Send"]
        let base = "https://login.microsoftonline.com"
        let notes = ["Register a 'Mobile and desktop applications' platform with the redirect URI below.",
                     "The scopes are for IMAP and SMTP (Outlook); replace them with --scope for other APIs (keep offline_access)."]
        switch tenant {
        case "common", "organizations":
            return ProviderPreset(
                name: "microsoft", issuer: "\(base)/\(tenant)/v2.0",
                authorizationEndpoint: "\(base)/\(tenant)/oauth2/v2.0/authorize", tokenEndpoint: "\(base)/\(tenant)/oauth2/v2.0/token",
                scopes: mail, extraAuthParams: [], needsClientSecret: false,
                notes: notes + ["The '\(tenant)' tenant has no fixed issuer, so no 'openid' scope: use --tenant YOUR-TENANT-ID if you need an ID token (e.g. for kubectl)."],
                signInLifetime: microsoftLifetime)
        case "consumers":
            return ProviderPreset(
                name: "microsoft", issuer: "\(base)/\(microsoftConsumersTenant)/v2.0",
                authorizationEndpoint: "\(base)/consumers/oauth2/v2.0/authorize", tokenEndpoint: "\(base)/consumers/oauth2/v2.0/token",
                jwksURI: "\(base)/consumers/discovery/v2.0/keys",
                scopes: ["openid", "email"] + mail, extraAuthParams: [], needsClientSecret: false, notes: notes,
                signInLifetime: microsoftLifetime)
        default:
            guard isGUID(tenant) else { throw .badTenant(tenant) }
            return ProviderPreset(name: "microsoft", issuer: "\(base)/\(tenant.lowercased())/v2.0",
                                  scopes: ["openid", "email"] + mail, extraAuthParams: [], needsClientSecret: false, notes: notes,
                signInLifetime: microsoftLifetime)
        }
    }

    /// Google binds the refresh token to a DPoP key and keeps access tokens Bearer (its DPoP adoption guide,
    /// https://developers.google.com/identity/protocols/oauth2/resources/dpop-adoption). Whether `dpop = "auto"` turns
    /// it on depends on Google's discovery document, which the agent reads at sign-in: the note says how to look.
    static let googleDPoPNote = "Google binds the refresh token to a DPoP key (access tokens stay Bearer). The agent uses it when https://accounts.google.com/.well-known/openid-configuration lists ES256 or EdDSA in dpop_signing_alg_values_supported (look with curl; once it is on, `authctl status` says \"DPoP: the refresh token is bound\"). Leave dpop unset (\"auto\"): dpop = true fails with dpop_refused while it is not listed."

    /// Refresh tokens live 90 days and each refresh issues a new one: 90 days without use end the sign-in
    /// (https://learn.microsoft.com/en-us/entra/identity-platform/refresh-tokens).
    static let microsoftLifetime = (period: "90d", kind: "idle")

    static func isGUID(_ text: String) -> Bool {
        let groups = text.split(separator: "-", omittingEmptySubsequences: false)
        return groups.map(\.count) == [8, 4, 4, 4, 12] && groups.allSatisfy { $0.allSatisfy(\.isHexDigit) }
    }
}
