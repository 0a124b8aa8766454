import Glibc
import AgentIPC

/// Checks and prepares where the socket lives: `$XDG_RUNTIME_DIR` must be the user's own private directory, and the
/// socket's directory is created 0700 (or must already be ours and 0700).
public enum RuntimeDirectory {
    /// Validates `$XDG_RUNTIME_DIR` (set, absolute, a directory, ours, no group/other access).
    public static func validate(environment: [String: String]) throws(ServerError) -> String {
        guard let runtime = environment["XDG_RUNTIME_DIR"], !runtime.isEmpty else {
            throw ServerError(.runtimeDirectory,
                "XDG_RUNTIME_DIR is not set; start auth-agent from a user session (systemd --user sets it) or set it to a private directory")
        }
        guard runtime.hasPrefix("/") else { throw ServerError(.runtimeDirectory, "XDG_RUNTIME_DIR (\(runtime)) is not an absolute path") }
        try checkPrivate(runtime, what: "XDG_RUNTIME_DIR")
        return runtime
    }

    /// Makes sure the directory holding `socketPath` exists, is ours and has mode 0700.
    public static func prepareSocketDirectory(for socketPath: String) throws(ServerError) {
        guard let slash = socketPath.lastIndex(of: "/"), slash != socketPath.startIndex else {
            throw ServerError(.socket, "the socket path \(socketPath) must be absolute")
        }
        let directory = String(socketPath[..<slash])
        if mkdir(directory, 0o700) != 0 && errno != EEXIST {
            throw ServerError(.socket, "cannot create \(directory): \(String(cString: strerror(errno)))")
        }
        try checkPrivate(directory, what: "the socket directory")
    }

    static func checkPrivate(_ path: String, what: String) throws(ServerError) {
        var info = stat()
        guard lstat(path, &info) == 0 else {
            throw ServerError(.runtimeDirectory, "\(what) \(path) does not exist: \(String(cString: strerror(errno)))")
        }
        guard info.st_mode & S_IFMT == S_IFDIR else { throw ServerError(.runtimeDirectory, "\(what) \(path) is not a directory") }
        guard info.st_uid == getuid() else {
            throw ServerError(.runtimeDirectory, "\(what) \(path) belongs to uid \(info.st_uid), not to you (uid \(getuid()))")
        }
        guard info.st_mode & 0o077 == 0 else {
            throw ServerError(.runtimeDirectory,
                "\(what) \(path) is accessible to other users (mode \(String(info.st_mode & 0o777, radix: 8))); run `chmod 700 \(path)`")
        }
    }

    /// Removes a socket file left by a dead agent. A live one (something accepts connections) is never touched.
    public static func removeStaleSocket(at path: String) throws(ServerError) {
        var info = stat()
        guard lstat(path, &info) == 0 else { return }
        guard info.st_mode & S_IFMT == S_IFSOCK else {
            throw ServerError(.socket, "\(path) exists and is not a socket; remove it if it is not needed")
        }
        do {
            _ = try AgentClient(path: path)
            throw ServerError(.alreadyRunning, "another auth-agent is already listening on \(path)")
        } catch let error as ServerError {
            throw error
        } catch ClientError.agentNotRunning {
            unlink(path)
        } catch {
            throw ServerError(.socket, "cannot tell whether \(path) is in use: \(error)")
        }
    }
}
