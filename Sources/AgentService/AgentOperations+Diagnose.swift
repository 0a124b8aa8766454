import AgentAccess
import AgentIPC
import AuthCore
import FoundationEssentials

extension AgentOperations {
    /// `authctl doctor`'s checks that need the agent: keyring, browser, and each account's metadata, keys and clock,
    /// through the same fetch and validation sign-in uses.
    public func diagnose(account: String?) async throws(WireError) -> DiagnoseResult {
        let diagnosis = try await translate { () async throws(AuthError) -> BrokerDiagnosis in
            try await broker.diagnose(account: account)
        }
        return AgentOperations.diagnoseResult(diagnosis, version: info.version)
    }

    /// The domain's diagnosis as the `diagnose` result (docs/PROTOCOL.md).
    static func diagnoseResult(_ diagnosis: BrokerDiagnosis, version: String) -> DiagnoseResult {
        func problem(_ error: AuthError?) -> DiagnoseResult.Problem? {
            error.map { DiagnoseResult.Problem(code: wireCode($0.code).rawValue, message: $0.message) }
        }
        var result = DiagnoseResult(
            agentVersion: version, keyring: diagnosis.keyring.rawValue, keyringService: diagnosis.keyringService?.program,
            keyringAdvice: diagnosis.keyring.advice(store: diagnosis.store, service: diagnosis.keyringService),
            store: diagnosis.store.rawValue, keptInMemory: diagnosis.inMemory.isEmpty ? nil : diagnosis.inMemory,
            browser: .init(program: diagnosis.browser.program, source: diagnosis.browser.source, problem: diagnosis.browser.problem,
                           display: diagnosis.browser.display, waylandDisplay: diagnosis.browser.waylandDisplay,
                           displaySource: diagnosis.browser.displaySource),
            accounts: diagnosis.accounts.map { account in
                DiagnoseResult.Account(
                    name: account.name, issuer: account.issuer, endpointsConfigured: account.endpointsConfigured,
                    authorizationEndpoint: account.metadata?.authorizationEndpoint.absoluteString,
                    tokenEndpoint: account.metadata?.tokenEndpoint.absoluteString,
                    revocationEndpoint: account.metadata?.revocationEndpoint?.absoluteString,
                    jwksURI: account.metadata?.jwksURI?.absoluteString,
                    error: problem(account.error), signingKeys: account.signingKeys,
                    signingKeysError: problem(account.signingKeysError),
                    serverTime: account.serverDate.map { Int($0.timeIntervalSince1970) },
                    agentTime: account.receivedAt.map { Int($0.timeIntervalSince1970) })
            })
        result.tpm = diagnosis.tpm.map { DiagnoseResult.TPM(tcti: $0.place, required: diagnosis.tpmRequired, problem: problem($0.problem)) }
        return result
    }
}
