import CSystemd

/// Sockets passed by systemd socket activation (`sd_listen_fds(3)`).
public enum ListenFDs {
    /// The passed file descriptors (`SD_LISTEN_FDS_START`, `+1`, ...), or `[]` when the process was not socket
    /// activated. Checks `LISTEN_PID` (so variables inherited from a parent are ignored) and unsets `LISTEN_PID`,
    /// `LISTEN_FDS` and `LISTEN_FDNAMES`, so a second call returns `[]` and children do not inherit them. The fds
    /// are close-on-exec. Call once, early, before starting threads that read the environment.
    public static func take() throws(SystemdError) -> [Int32] {
        let count = sd_listen_fds(1)
        if count < 0 { throw SystemdError("sd_listen_fds", returned: count) }
        let start = aa_sd_listen_fds_start()
        return (0..<count).map { start + $0 }
    }
}
