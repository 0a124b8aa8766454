import AgentService
import AgentIPC
import AgentAccess
import Logging
import ServiceLifecycle
import UnixSignals

/// SIGHUP re-reads the configuration file (`systemctl --user reload auth-agent`, `kill -HUP`): the same reload as
/// the `reload` request, with the outcome in the log, since a signal has nobody to answer.
public struct ReloadOnHangup: Service {
    let operations: AgentOperations
    let logger: Logger

    public init(operations: AgentOperations, logger: Logger) {
        self.operations = operations
        self.logger = logger
    }

    public func run() async throws {
        let hangups = await UnixSignalsSequence(trapping: .sighup)
        await withGracefulShutdownHandler {
            for await _ in hangups.cancelOnGracefulShutdown() {
                do throws(WireError) {
                    _ = try await operations.reload(trigger: "SIGHUP")
                } catch {
                    // ConfigFileSource has logged the error at its priority; the configuration in force stays.
                    logger.warning("SIGHUP: the configuration was not reloaded", metadata: ["error_code": "\(error.code)"])
                }
            }
        } onGracefulShutdown: {}
    }
}
