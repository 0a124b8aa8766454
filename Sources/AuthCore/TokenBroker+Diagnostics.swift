import FoundationEssentials
import Synchronization

/// What `authctl doctor` asks the agent: can each account's authorization server be reached, is its metadata valid,
/// how far apart are our clock and the server's, is there a keyring and a browser. Everything goes through the
/// same code the agent signs in and refreshes with (``ProviderDirectory``);
/// only the transport is wrapped, to read the servers' `Date` headers. Nothing here changes a token.
extension TokenBroker {
    /// One account's checks may take at most this long (a server that does not answer is reported, not waited for).
    public static let diagnosisLimit: Duration = .seconds(15)

    /// Checks `account` (or every account) against its authorization server, freshly (the metadata cache is not
    /// used, so a server that went away since shows up).
    public func diagnose(account: String? = nil) async throws(AuthError) -> BrokerDiagnosis {
        let configs: [AccountConfig]
        if let account {
            configs = [try state(account).config]
        } else {
            configs = accountNames.compactMap { accounts[$0]?.config }
        }
        let time = self.time
        let keyring = await self.keyring.view()
        var results: [String: AccountDiagnosis] = [:]
        await withTaskGroup(of: AccountDiagnosis.self) { group in
            for config in configs {
                group.addTask {
                    var timedOut = AccountDiagnosis(name: config.name, issuer: config.issuer.absoluteString)
                    timedOut.error = AuthError(.serverUnreachable,
                        "no answer within \(TokenBroker.diagnosisLimit.components.seconds) s: the server is unreachable or too slow")
                    return await time.within(TokenBroker.diagnosisLimit, fallback: timedOut) {
                        await self.diagnose(config)
                    }
                }
            }
            for await result in group { results[result.name] = result }
        }
        var diagnosis = BrokerDiagnosis(keyring: keyring.state, keyringService: keyring.service, store: self.keyring.choice,
                                        inMemory: await accountsInMemory, browser: browser.locate(),
                                        accounts: configs.compactMap { results[$0.name] })
        // The TPM is asked only when an account would use it (`dpop_key`).
        let places = accountOrder.compactMap { accounts[$0]?.config.dpopKey }
        if let keyHolder, places.contains(where: { $0 != .software }) {
            diagnosis.tpm = await keyHolder.check()
            diagnosis.tpmRequired = places.contains(.tpm)
        }
        return diagnosis
    }

    private func diagnose(_ config: AccountConfig) async -> AccountDiagnosis {
        let recorder = DateRecordingTransport(base: http, time: time)
        var result = AccountDiagnosis(name: config.name, issuer: config.issuer.absoluteString)
        result.endpointsConfigured = config.authorizationEndpoint != nil && config.tokenEndpoint != nil
        do throws(AuthError) {
            let metadata = try await providers.resolve(config, using: recorder)
            result.metadata = metadata
            if config.wantsOpenID {
                if let jwks = metadata.jwksURI {
                    do throws(AuthError) {
                        result.signingKeys = try await providers.signingKeys(account: config.name, from: jwks, refetch: true).count
                    } catch {
                        result.signingKeysError = error
                    }
                } else {
                    result.signingKeysError = AuthError(.invalidMetadata,
                        "the provider publishes no jwks_uri, so ID tokens cannot be checked; set jwks_uri for account '\(config.name)'")
                }
            }
        } catch {
            result.error = error
        }
        // Every endpoint configured: nothing was fetched, so ask the issuer itself for the time.
        if recorder.firstDate == nil { _ = try? await recorder.get(config.issuer) }
        if let first = recorder.firstDate {
            result.serverDate = HTTPDate.parse(first.0)
            result.receivedAt = first.1
        }
        return result
    }
}

/// The result of ``TokenBroker/diagnose(account:)``.
public struct BrokerDiagnosis: Sendable {
    public var keyring: KeyringState
    /// Who answers as the Secret Service (nil: none, or unknown).
    public var keyringService: KeyringService?
    /// `[agent] store`, and the accounts whose sign-in lives in memory only.
    public var store: StoreChoice
    public var inMemory: [String]
    public var browser: BrowserLocation
    public var accounts: [AccountDiagnosis]
    /// The TPM (`[agent] tpm_tcti`), asked when an account has `dpop_key` "tpm" or "auto"; `tpmRequired`: one has "tpm".
    public var tpm: KeyHolderCheck?
    public var tpmRequired = false
}

/// One account's checks: the resolved metadata (or why it failed), its signing keys, and the server's clock.
public struct AccountDiagnosis: Sendable {
    public var name: String
    public var issuer: String
    /// Both the authorization and token endpoints are set in config.toml (discovery only fills gaps).
    public var endpointsConfigured = false
    public var metadata: ProviderMetadata?
    public var error: AuthError?
    /// How many keys the provider's JWKS holds (accounts with `openid` only).
    public var signingKeys: Int?
    public var signingKeysError: AuthError?
    /// The server's `Date` header, and our wall clock when that reply arrived.
    public var serverDate: Date?
    public var receivedAt: Date?

    public init(name: String, issuer: String) {
        self.name = name
        self.issuer = issuer
    }
}

/// Passes requests through and keeps the first reply's `Date` header with the moment it arrived.
final class DateRecordingTransport: HTTPTransport, @unchecked Sendable {
    private let base: any HTTPTransport
    private let time: any TimeSource
    private let lock = Mutex(())
    private var first: (String, Date)?

    init(base: any HTTPTransport, time: any TimeSource) {
        self.base = base
        self.time = time
    }

    var firstDate: (String, Date)? { lock.withLock { _ in first } }

    func get(_ url: URL) async throws(AuthError) -> HTTPReply {
        record(try await base.get(url))
    }

    func postForm(_ url: URL, fields: [(String, String)], basicAuth: (user: String, password: Secret)?,
                  headers: [(String, String)]) async throws(AuthError) -> HTTPReply {
        record(try await base.postForm(url, fields: fields, basicAuth: basicAuth, headers: headers))
    }

    private func record(_ reply: HTTPReply) -> HTTPReply {
        let now = time.wallClock()
        lock.withLock { _ in if first == nil, let date = reply.date { first = (date, now) } }
        return reply
    }
}
