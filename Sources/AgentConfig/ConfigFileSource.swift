import AgentIPC
import AgentAccess
import AuthCore
import CProcFS
import FoundationEssentials
import Logging
import Glibc

/// The configuration file as the agent reads it again after start-up (`authctl reload`, SIGHUP, and each request
/// while the file is broken): parses it with ``ConfigLoader`` and puts its accounts and access policies in force.
/// The `[agent]` settings are read once, at start-up; a reload names those that changed as needing a restart.
public actor ConfigFileSource: ConfigurationSource {
    let path: String
    let explicit: Bool
    /// The `[agent]` settings this process runs with (the defaults if the file was broken at start-up).
    let running: AgentConfiguration
    let broker: TokenBroker
    let access: AccessGate
    let logger: Logger
    private var lastStamp: FileStamp?
    private var lastOutcome: Result<ReloadResult, WireError>?

    /// `initial` is what start-up read: the configuration, or its error.
    public init(path: String, explicit: Bool, initial: Result<AgentConfiguration, ConfigError>, broker: TokenBroker,
         access: AccessGate, logger: Logger) {
        self.path = path
        self.explicit = explicit
        self.broker = broker
        self.access = access
        self.logger = logger
        self.lastStamp = FileStamp(path: path)
        switch initial {
        case .success(let configuration):
            self.running = configuration
            self.lastOutcome = .success(ReloadResult(path: path, accounts: configuration.accounts.map(\.name)))
        case .failure(let error):
            self.running = AgentConfiguration(path: path, accounts: [])
            self.lastOutcome = .failure(ConfigFileSource.wireError(error))
        }
    }

    public func reload(ifChanged: Bool) async throws(WireError) -> ReloadResult {
        let stamp = FileStamp(path: path)
        if ifChanged, stamp == lastStamp, let lastOutcome { return try lastOutcome.get() }
        lastStamp = stamp
        let configuration: AgentConfiguration
        do {
            configuration = try ConfigLoader.load(path: path, explicit: explicit)
        } catch {
            let wire = ConfigFileSource.wireError(error)
            lastOutcome = .failure(wire)
            logger.error("configuration error: \(error.description)", metadata: ["path": "\(path)"])
            throw wire
        }
        let changes = await broker.reconfigure(configuration.accounts)
        access.replacePolicies(Dictionary(configuration.accounts.map { ($0.name, $0.access) },
                                          uniquingKeysWith: { first, _ in first }))
        let result = ReloadResult(path: path, accounts: configuration.accounts.map(\.name), added: changes.added, removed: changes.removed,
                                  changed: changes.changed, needsRestart: running.settingsDiffering(from: configuration))
        lastOutcome = .success(result)
        return result
    }

    public static func wireError(_ error: ConfigError) -> WireError {
        WireError(.configError, "\(error.description) (fix the file; the agent reads it again on the next request, or run `authctl reload`)")
    }
}

extension AgentConfiguration {
    /// The `[agent]` keys whose values differ between the two (those take effect only at the next start).
    func settingsDiffering(from other: AgentConfiguration) -> [String] {
        var keys: [String] = []
        if logLevel != other.logLevel { keys.append("log_level") }
        if idleExit != other.idleExit { keys.append("idle_exit") }
        if httpTimeout != other.httpTimeout { keys.append("http_timeout") }
        if notifications != other.notifications { keys.append("notifications") }
        if consentTimeout != other.consentTimeout { keys.append("consent_timeout") }
        if store != other.store { keys.append("store") }
        if tpmTCTI != other.tpmTCTI { keys.append("tpm_tcti") }
        return keys
    }
}

/// What tells a file's versions apart without reading it: its identity, size and times (nil: it does not exist).
struct FileStamp: Equatable {
    let device: UInt64, inode: UInt64, size: UInt64, modified: Int64, changed: Int64

    init?(path: String) {
        var info = aa_file_info()
        guard aa_file_info_at(AT_FDCWD, path, 0, &info) == 0 else { return nil }
        (device, inode, size, modified, changed) = (info.device, info.inode, info.size, info.modified_ns, info.changed_ns)
    }
}

extension Result {
    /// The error, if this is a failure.
    public var failure: Failure? {
        if case .failure(let error) = self { return error }
        return nil
    }
}
