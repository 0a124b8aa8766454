/// What the system bus tells the agent about the machine: logind's sleep and resume, NetworkManager's connectivity.
/// Pure mapping from the signals' arguments, tested without a bus.
public enum SystemEvent: Sendable, Equatable {
    case suspending
    case resumed
    case networkUp

    /// `NM_STATE_CONNECTED_GLOBAL`: full connectivity. The lower states (`CONNECTED_SITE` 60, `CONNECTED_LOCAL` 50,
    /// connecting, disconnected) cannot reach an authorization server on the internet, so they retry nothing.
    public static let networkConnectedGlobal: UInt32 = 70

    /// logind's `PrepareForSleep(b start)`: true before the suspend, false after the resume.
    public static func prepareForSleep(_ start: Bool) -> SystemEvent { start ? .suspending : .resumed }

    /// NetworkManager's `StateChanged(u state)`.
    public static func networkState(_ state: UInt32) -> SystemEvent? {
        state == networkConnectedGlobal ? .networkUp : nil
    }
}
