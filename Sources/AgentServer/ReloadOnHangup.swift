import AgentIPC
import Logging
import ServiceLifecycle
import UnixSignals

/// SIGHUP re-reads the configuration file (`systemctl --user reload auth-agent`, `kill -HUP`): the same reload as
/// the `reload` request, with the outcome in the log, since a signal has nobody to answer.
public struct ReloadOnHangup: Service {
    let configuration: ConfigurationGate
    let logger: Logger

    public init(configuration: ConfigurationGate, logger: Logger) {
        self.configuration = configuration
        self.logger = logger
    }

    public func run() async throws {
        let hangups = await UnixSignalsSequence(trapping: .sighup)
        await withGracefulShutdownHandler {
            for await _ in hangups.cancelOnGracefulShutdown() {
                do {
                    let result = try await configuration.reload()
                    logger.notice("configuration reloaded (SIGHUP)", metadata: [
                        "accounts": "\(result.accounts.count)", "added": "\(result.added.joined(separator: ","))",
                        "removed": "\(result.removed.joined(separator: ","))",
                        "changed": "\(result.changed.joined(separator: ","))",
                        "needs_restart": "\(result.needsRestart.joined(separator: ","))"])
                } catch {
                    // ConfigFileSource has logged the error at its priority; the configuration in force stays.
                    logger.warning("SIGHUP: the configuration was not reloaded", metadata: ["error_code": "\((error as? WireError)?.code ?? "unknown")"])
                }
            }
        } onGracefulShutdown: {}
    }
}
