import AgentIPC
import AuthCore

extension WireCaller {
    /// The wire form of a caller's identity: its kind, and the members that kind has. Pure: the fuzz target runs it.
    init(pid: Int32, via: String, identity: ClientIdentity) {
        let kind: WireCaller.Kind = switch identity.kind {
        case .desktop: .desktop
        case .hostContainer: .hostContainer
        case .container: .container
        case .flatpak: .flatpak
        case .unidentified: .unidentified
        case .forwarded: .sshHost
        case .unknownForward: .sshUnknown
        }
        self.init(pid: pid, via: via, kind: kind, exe: identity.exe, exeDeleted: identity.exeDeleted ? true : nil,
                  unit: identity.unit, relayedBy: identity.relay?.executables)
        switch identity.kind {
        case .flatpak(let app):
            (flatpakApp, flatpakInstance) = (app.id, app.instance)
            notContained = app.holes.isEmpty ? nil : app.holes
        case .unidentified(let why, let claimed):
            (unidentified, flatpakApp) = (why, claimed)
        case .forwarded(let host):
            (self.host, hostAlias, hostKey, remoteProgram) = (host.name, host.alias, host.fingerprint, host.program)
        case .desktop, .hostContainer, .container, .unknownForward: break
        }
    }
}
