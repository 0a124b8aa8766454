/// Who a local client is, as the agent's access policy sees it: facts the agent read from the kernel
/// (`/proc/PID/exe`, `/proc/PID/cgroup`, the Flatpak sandbox's `.flatpak-info`), never anything the client sent.
/// Pure value: the front ends derive it (AgentAccess's `Caller.identify`), the policy judges it.
///
/// For a request relayed by the agent's own `authctl` (mail clients, git and kubectl run authctl; they do not
/// connect themselves), the facts are those of the program behind authctl, and ``relay`` names authctl and any
/// shells in between (AgentServer's `RelayChain`).
public struct ClientIdentity: Sendable, Hashable {
    /// The executable's path as the kernel names it, without the " (deleted)" suffix; nil when unreadable.
    public var exe: String?
    /// The executable was deleted or replaced since the process started: the path no longer names what runs.
    public var exeDeleted: Bool
    /// The systemd unit (`mbsync.service`, `app-gnome-foo-123.scope`, `session-2.scope`) from the cgroup, if any.
    public var unit: String?
    /// The Flatpak application id when the caller runs in a Flatpak sandbox.
    public var flatpakApp: String?
    /// The Flatpak instance (`[Instance] instance-id` of its `/.flatpak-info`): one run of the app.
    public var flatpakInstance: String?
    /// The holes in the app's sandbox that let it act as any program of the user ("not contained"), as `flatpak
    /// override` spells them (`socket=session-bus`, `filesystem=home`, `talk-name=org.freedesktop.secrets`). Shown
    /// wherever the app is named, so that the user judges it as the host program it can be; the policy is the same.
    public var sandboxHoles: [String]
    /// Why the app's `/.flatpak-info` does not match its instance's namespaces (`bwrapinfo.json`): the app it names is
    /// not believed, so no entry or decision names it, and no account serves it (``isSandboxed``, ``consentKey``).
    public var instanceMismatch: String?
    /// The caller runs in a root directory of its own (a sandbox, a container, a chroot: not the agent's `/`, or one
    /// the agent cannot read) that names no app: its `/.flatpak-info` is missing or cannot be read safely. Its paths
    /// are the sandbox's own and may imitate the host's (a sandboxed `/usr/bin/git`), so no path names it: it is
    /// named by no ``policyExe`` and no ``consentKey`` (only a `unit:` entry can name it). A root the agent can read is
    /// a host process's own doing (a container such as toolbox, or a bwrap a host program made): host processes are
    /// trusted already, so an account without a policy serves it like any process of yours.
    public var unnamedSandbox: Bool
    /// The agent cannot read the caller's root at all (a non-dumpable process, a setuid bwrap's sandbox): it may be a
    /// sandbox, so it is ``isSandboxed`` (never served by "any program of yours") and, naming no app, unidentified.
    public var rootUnreadable: Bool
    /// The caller runs in a pid namespace of its own, made in a user namespace of its own (a rootless container,
    /// `unshare -Urp`, a Flatpak sandbox). A process there may attach credentials naming another process of that
    /// namespace to what it writes, and the kernel takes them: the agent cannot tell who wrote a request, so the
    /// path does not name the caller (``policyExe``).
    public var ownPIDNamespace: Bool
    /// Set when the process that connected is the agent's authctl, acting for the program these facts describe.
    public var relay: Relay?
    /// Set when the request came from another host through ssh: the caller is that host, never a local program
    /// (the facts above are the local ssh client's).
    public var forward: Forward?
    /// The `authctl forward` session a forwarded request came through (``runKey``).
    public var forwardSession: String?

    /// A request forwarded from another host.
    public enum Forward: Sendable, Hashable {
        /// Through an `authctl forward` session: the host as ssh names it when it checks the host key (its
        /// `HostKeyAlias`, else its `HostName` with `:PORT` when not 22) and the fingerprint (`SHA256:...`) of the
        /// host key ssh was shown for that session. `program` is what the remote side said runs there: not verified.
        case host(name: String, fingerprint: String, program: String? = nil)
        /// From an ssh client with no session of the agent's (a bare `ssh -R` of the agent's socket): the host is not
        /// known.
        case unknown

        /// `ssh:HOST`, or `ssh:unknown-host`: the front end's name for how the request came (the audit's `via`).
        public var via: String {
            switch self {
            case .host(let name, _, _): return "ssh:\(name)"
            case .unknown: return "ssh:unknown-host"
            }
        }
    }

    /// How a relayed request reached the agent: the authctl that connected (its own identity, as a direct caller's)
    /// and the shells between the program and it.
    public struct Relay: Sendable, Hashable {
        /// The authctl that connected: its path (never deleted or replaced: only the installed one relays) and unit.
        public var exe: String
        public var unit: String?
        /// The shells (`sh -c` of `passwordeval`, git's `!` helpers) between the program and authctl, nearest to the
        /// program first, by executable path.
        public var shells: [String]

        public init(exe: String, unit: String? = nil, shells: [String] = []) {
            self.exe = exe
            self.unit = unit
            self.shells = shells
        }

        /// The relay's executables, nearest to the program first; the last is the authctl that connected.
        public var executables: [String] { shells + [exe] }
    }

    public init(exe: String?, exeDeleted: Bool = false, unit: String? = nil, flatpakApp: String? = nil,
                unnamedSandbox: Bool = false, rootUnreadable: Bool = false, ownPIDNamespace: Bool = false,
                relay: Relay? = nil, flatpakInstance: String? = nil, sandboxHoles: [String] = [],
                instanceMismatch: String? = nil, forward: Forward? = nil) {
        self.exe = exe
        self.exeDeleted = exeDeleted
        self.unit = unit
        self.flatpakApp = flatpakApp
        self.flatpakInstance = flatpakInstance
        self.sandboxHoles = sandboxHoles
        self.instanceMismatch = instanceMismatch
        self.unnamedSandbox = unnamedSandbox || rootUnreadable
        self.rootUnreadable = rootUnreadable
        self.ownPIDNamespace = ownPIDNamespace
        self.relay = relay
        self.forward = forward
    }

    /// The caller runs in a sandbox: a Flatpak app, or a root the agent cannot read. Such a caller is never served by
    /// an account's default "any program of yours" (``AccessPolicy/decide(_:remembered:)``).
    public var isSandboxed: Bool { flatpakApp != nil || rootUnreadable || instanceMismatch != nil }

    /// A sandboxed app whose sandbox has a hole that makes it host-equivalent (``sandboxHoles``).
    public var isNotContained: Bool { !sandboxHoles.isEmpty }

    /// The Flatpak app when it names the caller: not contradicted by its instance's namespaces (``instanceMismatch``).
    /// `flatpak:` entries and remembered decisions go by it.
    public var policyFlatpakApp: String? { instanceMismatch == nil ? flatpakApp : nil }

    /// The caller is not a program of the user's on this host: a sandboxed app or another host through ssh. Such a
    /// caller may get tokens (and DPoP proofs) of the accounts it was given and nothing else: no sign-in, no consent
    /// answers, no account edits, no listing of other accounts (AgentOperations), and it is never served by an
    /// account's default "any program of yours".
    public var isConfined: Bool { isSandboxed || forward != nil }

    /// The executable's path when it names the caller: read, neither deleted nor replaced (then the path no longer
    /// says what runs), outside any sandbox (whose paths are its own, ``isSandboxed``) and outside a pid namespace of
    /// its own (``ownPIDNamespace``). Path entries of `allowed_clients`, remembered consent and the relay chain go by it.
    public var policyExe: String? {
        guard !isSandboxed, !unnamedSandbox, !exeDeleted, !ownPIDNamespace, forward == nil else { return nil }
        return exe
    }

    /// The name consent decisions are remembered under (`authctl forget`, the consent file): `flatpak:APP` for a
    /// sandboxed app (its paths are the sandbox's), else ``policyExe``. Nil when the caller cannot be named reliably
    /// (unknown, deleted or replaced executable, a pid namespace of its own, or a sandbox that names no app): such a
    /// caller can be neither listed nor remembered. For a relayed
    /// request it is the program behind authctl: the user is asked about msmtp, not about authctl.
    /// A forwarded host is remembered by name and host key (`ssh:HOST@SHA256:...`): a host whose key changed is a
    /// new host, asked again.
    public var consentKey: String? {
        switch forward {
        case .host(let name, let fingerprint, _)?: return "ssh:\(name)@\(fingerprint)"
        case .unknown?: return nil
        case nil: break
        }
        if let flatpakApp { return policyFlatpakApp.map { "flatpak:\($0)" } }
        return policyExe
    }

    /// What "allow this run" remembers, in memory only: the consent key with the run it belongs to, a Flatpak app's
    /// instance or a forwarded host's ssh session. Nil when the caller has no such run (then it can be allowed only
    /// always, or denied).
    public var runKey: String? {
        guard let consentKey, let run = forward == nil ? flatpakInstance : forwardSession else { return nil }
        return consentKey + "#" + run
    }

    /// What "this run" is, for people: `instance 1234` or `this ssh session`.
    public var runDescription: String? {
        guard runKey != nil else { return nil }
        return forward == nil ? flatpakInstance.map { "instance \($0)" } : "this ssh session"
    }

    /// One line for people: messages, `authctl pending`, the notification. A relayed request reads
    /// `/usr/bin/msmtp via dash via authctl` (the relay's executables by their file names).
    public var summary: String {
        switch forward {
        case .host(let name, let fingerprint, let program)?:
            return "host \(name) over ssh (host key \(fingerprint))" + (program.map { ", running \($0) (said by the host, not verified)" } ?? "")
        case .unknown?:
            return "an unknown host over ssh (a forward of the agent's socket by \(exe ?? "ssh") not made by `authctl forward`)"
        case nil: break
        }
        var parts: [String] = []
        if let flatpakApp { parts.append("flatpak:\(flatpakApp)") }
        if let flatpakInstance { parts.append("(instance \(flatpakInstance))") }
        if let instanceMismatch { parts.append("(not that instance: \(instanceMismatch))") }
        if isNotContained { parts.append("(not contained: \(sandboxHoles.joined(separator: ", ")))") }
        parts.append(exe.map { exeDeleted ? "\($0) (deleted)" : $0 } ?? "unknown executable")
        if unnamedSandbox { parts.append("(sandbox naming no app)") }
        if ownPIDNamespace { parts.append("(own pid namespace)") }
        if let relay { parts.append(ClientIdentity.via(relay.executables)) }
        if let unit { parts.append("unit:\(unit)") }
        return parts.joined(separator: " ")
    }

    /// `via dash via authctl`: each relay executable by its file name.
    public static func via(_ executables: [String]) -> String {
        executables.map { "via \($0.split(separator: "/").last.map(String.init) ?? $0)" }.joined(separator: " ")
    }
}
