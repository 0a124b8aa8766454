/// Who a local client is, as the agent's access policy sees it: facts the agent read from the kernel
/// (`/proc/PID/exe`, `/proc/PID/cgroup`, the caller's root and pid namespace, a sandbox's `/.flatpak-info`), never
/// anything the client sent. Pure value: the front ends derive it (AgentAccess's `Caller.identify`), the policy
/// judges it.
///
/// A caller is one ``Kind``; what it may do is a property of its kind (``isConfined``, ``consentKey``, and which
/// `allowed_clients` entries can name it: ``ClientRule/matches(_:)``), never of flags that must agree. Whatever the
/// agent cannot read or believe is ``Kind/unidentified(why:claimedApp:)``: confined, and named by nothing.
///
/// For a request relayed by the agent's own `authctl` (mail clients, git and kubectl run authctl; they do not
/// connect themselves), the facts are those of the program behind authctl, and ``relay`` names authctl and any
/// shells in between (AgentAccess's `RelayChain`).
public struct ClientIdentity: Sendable, Hashable {
    /// What the caller is. Each case carries only what names it.
    public enum Kind: Sendable, Hashable {
        /// A program of the desktop: the agent's root directory and pid namespace. Named by its path (when it still
        /// runs the file at that path) and its unit.
        case desktop
        /// A root directory of its own in the agent's pid namespace, naming no app (toolbox, distrobox, a bwrap a host
        /// program made): host code by construction, served as any program of yours. Its paths are its own, so only
        /// its unit names it.
        case hostContainer
        /// A pid namespace of its own, naming no app (podman, docker, `unshare -Urp`): confined. Its paths are its
        /// own and another process there may write in its name, so only the unit the host gave it names it.
        case container
        /// A Flatpak app, named by its sandbox's `/.flatpak-info` and consistent with its instance: confined.
        case flatpak(FlatpakApp)
        /// A caller the agent cannot read or believe (a root it may not read; a sandbox marker it cannot read,
        /// parse or reconcile with the instance's namespaces): confined and named by nothing. `why` says which;
        /// `claimedApp` is the app the marker names, not believed.
        case unidentified(why: String, claimedApp: String? = nil)
        /// Another host, through an `authctl forward` session: confined, named by `ssh:` entries only.
        case forwarded(ForwardedHost)
        /// An ssh client forwarding the agent's socket without a session of the agent's (a bare `ssh -R`): confined,
        /// named only by the explicit `ssh:unknown-host` entry.
        case unknownForward
        /// A connection that arrived on a grant's socket (`authctl grant`): it is that grant, whatever process it is
        /// (the kernel fixes which listener accepted it). Confined; served the grant's accounts only, never asked
        /// about (the grant is the user's consent), named by no `allowed_clients` entry.
        case granted(Grant)
    }

    /// A grant as a caller of it is: its name and accounts, and what the agent saw of the process that connected
    /// (shown in the audit, never judged: the door is the identity).
    public struct Grant: Sendable, Hashable {
        public var name: String
        public var accounts: [String]
        /// The container engine and id its cgroup names (`podman 0123abcd...`, `docker ...`), when it does.
        public var container: String?
        /// The process's pid namespace (`pid:[4026532...]`) when it is not the agent's.
        public var pidNamespace: String?
        /// Where its DPoP proofs may be used (``ProofRule``); empty: anywhere.
        public var proofURLs: [String]
        /// Not served while the user's session is locked.
        public var lockWithSession: Bool
        /// The scopes its tokens are narrowed to (sorted); nil: the account's (``served(scopes:resource:)``).
        public var scopes: [String]?
        /// The RFC 8707 resource its tokens are for; nil: as asked.
        public var resource: String?
        /// Its accounts served from a sign-in of the grant's own (``GrantSignIn``), not the account's.
        public var ownSignIns: [String]

        public init(name: String, accounts: [String], container: String? = nil, pidNamespace: String? = nil,
                    proofURLs: [String] = [], lockWithSession: Bool = false, scopes: [String]? = nil,
                    resource: String? = nil, ownSignIns: [String] = []) {
            self.lockWithSession = lockWithSession
            self.ownSignIns = ownSignIns
            self.scopes = scopes
            self.resource = resource
            self.name = name
            self.accounts = accounts
            self.proofURLs = proofURLs
            self.container = container
            self.pidNamespace = pidNamespace
        }
    }

    /// A Flatpak app as its `/.flatpak-info` names it.
    public struct FlatpakApp: Sendable, Hashable {
        /// `[Application] name`, a valid application id.
        public var id: String
        /// `[Instance] instance-id`: one run of the app.
        public var instance: String?
        /// The holes in its sandbox that let it act as any program of the user ("not contained"), as `flatpak
        /// override` spells them. Shown wherever the app is named; the policy is the same.
        public var holes: [String]

        public init(id: String, instance: String? = nil, holes: [String] = []) {
            self.id = id
            self.instance = instance
            self.holes = holes
        }
    }

    /// A host as `authctl forward` names it: by the name ssh checks its key under, and by the name the person typed
    /// when that is another (a `Host` alias of their ssh configuration). `ssh:` entries match either.
    public struct ForwardedHost: Sendable, Hashable {
        /// The name ssh checks the host key under (`HostKeyAlias`, else `HostName` with `:PORT` when not 22).
        public var name: String
        /// The name the person typed (`ssh -G`'s `host`: the alias of a `Host` block) when it is not ``name``; from
        /// the desktop user's own ssh configuration, as trusted as the forward itself.
        public var alias: String?
        /// The fingerprint (`SHA256:...`) of the host key ssh was shown for the session.
        public var fingerprint: String
        /// What the remote side said runs there: shown as said by the host, never judged.
        public var program: String?
        /// The session's id: "this run" of the host.
        public var session: String

        public init(name: String, alias: String? = nil, fingerprint: String, program: String? = nil, session: String) {
            self.name = name
            self.alias = alias
            self.fingerprint = fingerprint
            self.program = program
            self.session = session
        }

        /// What people call the host: the name they typed, else ssh's key name. Decisions are remembered under it.
        public var shownName: String { alias ?? name }
    }

    public var kind: Kind
    /// The executable's path as the kernel names it, without the " (deleted)" suffix; nil when unreadable. Only a
    /// program of the desktop is named by it (``policyExe``); for others it is shown, never judged.
    public var exe: String?
    /// The executable was deleted or replaced since the process started: the path no longer names what runs.
    public var exeDeleted: Bool
    /// The systemd unit (`mbsync.service`, `app-gnome-foo-123.scope`, `libpod-ID.scope`) from the cgroup, if any.
    public var unit: String?
    /// Set when the process that connected is the agent's authctl, acting for the program these facts describe.
    public var relay: Relay?

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

    public init(_ kind: Kind = .desktop, exe: String?, exeDeleted: Bool = false, unit: String? = nil, relay: Relay? = nil) {
        self.kind = kind
        self.exe = exe
        self.exeDeleted = exeDeleted
        self.unit = unit
        self.relay = relay
    }

    /// Not a program of the user's on this host (nor host code by construction): an app, a container, another
    /// host, or a caller the agent cannot read. Such a caller may get tokens (and DPoP proofs) of the accounts it was
    /// given and nothing else: no sign-in, no consent answers, no account edits, no forwards, no listing of other
    /// accounts (AgentOperations), and it is never served by an account's default "any program of yours".
    public var isConfined: Bool {
        switch kind {
        case .desktop, .hostContainer: return false
        case .container, .flatpak, .unidentified, .forwarded, .unknownForward, .granted: return true
        }
    }

    /// The executable's path when it names the caller: a program of the desktop whose path still names what runs.
    /// Path entries of `allowed_clients`, remembered consent and the relay chain go by it.
    public var policyExe: String? {
        guard case .desktop = kind, !exeDeleted else { return nil }
        return exe
    }

    /// The name consent decisions are remembered under (`authctl forget`, the consent file): a program's path,
    /// `unit:NAME` for a container, `flatpak:APP` for an app, `ssh:HOST@SHA256:...` for a forwarded host, HOST being
    /// the name the person typed (a host whose key changed is a new host, asked again; `authctl forget --client
    /// ssh:HOST` forgets it under every key). Nil when the caller cannot be named reliably: then it can be
    /// neither asked, listed nor remembered. For a relayed request it is the program behind authctl: the user is
    /// asked about msmtp, not about authctl.
    public var consentKey: String? {
        switch kind {
        case .desktop: return policyExe
        case .container: return unit.map { "unit:\($0)" }
        case .flatpak(let app): return "flatpak:\(app.id)"
        case .forwarded(let host): return "ssh:\(host.shownName)@\(host.fingerprint)"
        case .hostContainer, .unidentified, .unknownForward, .granted: return nil
        }
    }

    /// What "allow this run" remembers, in memory only: the consent key with the run it belongs to, a Flatpak app's
    /// instance or a forwarded host's ssh session. Nil when the caller has no such run (then it can be allowed only
    /// always, or denied).
    public var runKey: String? {
        guard let consentKey, let run = run else { return nil }
        return consentKey + "#" + run.id
    }

    /// The run a caller belongs to, and how people read it (`instance 1234`, `this ssh session`).
    public var run: (id: String, description: String)? {
        switch kind {
        case .flatpak(let app): return app.instance.map { ($0, "instance \($0)") }
        case .forwarded(let host): return (host.session, "this ssh session")
        default: return nil
        }
    }

    /// What "this run" is, for people, when the caller has one.
    public var runDescription: String? { runKey == nil ? nil : run?.description }

    /// The grant a caller came through, when it did.
    public var grantName: String? {
        if case .granted(let grant) = kind { return grant.name }
        return nil
    }

    /// The Flatpak app that names the caller, when it is one.
    public var flatpakAppID: String? {
        if case .flatpak(let app) = kind { return app.id }
        return nil
    }

    /// The `allowed_clients` spelling that would name this caller, for refusals: nil when none can.
    public var entry: String? {
        switch kind {
        case .desktop: return policyExe
        case .container, .hostContainer: return unit.map { "unit:\($0)" }
        case .flatpak(let app): return "flatpak:\(app.id)"
        case .forwarded(let host): return "ssh:\(host.shownName)"
        case .unknownForward: return "ssh:\(ClientRule.unknownHost)"
        case .unidentified, .granted: return nil
        }
    }
}
