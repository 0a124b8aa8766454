import AgentIPC
import ArgumentParser
import AuthCLI

/// `authctl lock` / `authctl unlock`: for screen lockers that do not tell logind (swaylock, i3lock), so that accounts
/// with `lock_with_session = true` and grants made with `--lock-with-session` are refused while the screen is locked.
struct Lock: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "lock",
        abstract: "Refuse what locks with the session (lock_with_session, grant --lock-with-session) until `authctl unlock`.",
        discussion: """
        Lockers that set logind's LockedHint (GNOME's, KDE's) need nothing: the agent follows the hint. For others, \
        run it before the locker and `authctl unlock` after it, e.g. with swayidle: \
        timeout 300 'authctl lock; swaylock; authctl unlock'.
        """)
    @OptionGroup var global: GlobalOptions
    @Flag(help: "Print JSON.") var json = false

    func run() throws { try LockCommand.run(global: global, lock: true, json: json) }
}

struct Unlock: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "unlock", abstract: "Serve again what `authctl lock` refused (logind's own lock is logind's).")
    @OptionGroup var global: GlobalOptions
    @Flag(help: "Print JSON.") var json = false

    func run() throws { try LockCommand.run(global: global, lock: false, json: json) }
}

enum LockCommand {
    static func run(global: GlobalOptions, lock: Bool, json: Bool) throws {
        let client = try global.connect()
        let result = try CLIFailure.wrap { () throws(ClientError) in
            try client.call(WireRequest(op: lock ? .lock : .unlock), as: LockResult.self)
        }
        if json { return printJSON(result) }
        if let by = result.lockedBy {
            print(TerminalText.safe("locked by \(by): accounts and grants that lock with the session are refused"))
        } else {
            print("unlocked: accounts and grants that lock with the session are served")
        }
    }
}
