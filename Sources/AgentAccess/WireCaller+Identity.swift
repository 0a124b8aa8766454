import AgentIPC
import AuthCore

extension WireCaller {
    /// The wire form of a caller's identity: its kind, and the members that kind has. Pure: the fuzz target runs it.
    init(pid: Int32, via: String, identity: ClientIdentity) {
        self.init(pid: pid, via: via, kind: WireCaller.Kind(identity.kind), exe: identity.exe, exeDeleted: identity.exeDeleted ? true : nil,
                  unit: identity.unit, relayedBy: identity.relay?.executables)
        switch identity.kind {
        case .flatpak(let app):
            (flatpakApp, flatpakInstance) = (app.id, app.instance)
            notContained = app.holes.isEmpty ? nil : app.holes
        case .unidentified(let why, let claimed):
            (unidentified, flatpakApp) = (why, claimed)
        case .forwarded(let host):
            (self.host, hostAlias, hostKey, remoteProgram) = (host.name, host.alias, host.fingerprint, host.program)
        case .granted(let grant):
            (self.grant, container, pidNamespace) = (grant.name, grant.container, grant.pidNamespace)
        case .desktop, .hostContainer, .container, .unknownForward: break
        }
    }
}

extension WireCaller.Kind {
    /// The wire name of a caller's kind: the audit's `kind`, `pending`'s and `status`'s `view`.
    public init(_ kind: ClientIdentity.Kind) {
        self = switch kind {
        case .desktop: .desktop
        case .hostContainer: .hostContainer
        case .container: .container
        case .flatpak: .flatpak
        case .unidentified: .unidentified
        case .forwarded: .sshHost
        case .unknownForward: .sshUnknown
        case .granted: .grant
        }
    }
}
