import AgentAccess
import AgentIPC
import FoundationEssentials
import Synchronization

/// Reads the configuration file and puts it in force (the composition root's ``ConfigurationSource`` knows the file
/// format and what to reconfigure; the front ends only ask).
public protocol ConfigurationSource: Sendable {
    /// Re-reads the file and, when it is valid, puts it in force and says what changed. With `ifChanged`, a file
    /// whose identity, size and modification time are those of the last read is not parsed again: its last outcome
    /// stands. An invalid file throws `config_error` with `file:line: what to fix`; the configuration in force stays.
    func reload(ifChanged: Bool) async throws(WireError) -> ReloadResult
}

/// The front ends' view of the configuration: in force, or broken. While the file is broken (the agent started
/// with an invalid file: it does not exit, so systemd's socket stays alive and clients are not left hanging in a
/// restart loop), every request is answered with `config_error` and its `file:line` message, and each request first
/// looks whether the file changed: the first request after the user fixes it is served, with no restart.
/// A failed `reload` of a configuration already in force leaves it serving and does not make the gate broken.
public final class ConfigurationGate: Sendable {
    private let source: (any ConfigurationSource)?
    private let problem: Mutex<WireError?>
    private let onChange: @Sendable () -> Void

    /// `problem`: the error of the file read at start-up, if it was invalid. `onChange` is called after every
    /// change of the configuration in force or of its problem (the status line follows it).
    public init(source: (any ConfigurationSource)?, problem: WireError? = nil,
                onChange: @escaping @Sendable () -> Void = {}) {
        self.source = source
        self.problem = Mutex(problem)
        self.onChange = onChange
    }

    /// The problem that makes every request fail now, if any (for the status line).
    public var currentProblem: WireError? { problem.withLock { $0 } }

    /// Returns when requests may be served; throws `config_error` while the file is broken and unchanged (or
    /// changed and still broken).
    public func admit() async throws(WireError) {
        guard problem.withLock({ $0 }) != nil else { return }
        _ = try await reload(ifChanged: true)
    }

    /// `authctl reload` and SIGHUP: reads the file even if it looks unchanged.
    public func reload() async throws(WireError) -> ReloadResult { try await reload(ifChanged: false) }

    private func reload(ifChanged: Bool) async throws(WireError) -> ReloadResult {
        guard let source else { throw WireError(.configError, "this agent has no configuration file to read") }
        do throws(WireError) {
            let result = try await source.reload(ifChanged: ifChanged)
            if problem.withLock({ old in defer { old = nil }; return old != nil }) { onChange() }
            return result
        } catch {
            // Only a broken start-up configuration is replaced by the new problem; one in force keeps serving.
            let changed = problem.withLock { old -> Bool in
                guard let current = old else { return false }
                old = error
                return current != error
            }
            if changed { onChange() }
            throw error
        }
    }
}
