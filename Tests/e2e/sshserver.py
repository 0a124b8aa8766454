"""Real OpenSSH servers on loopback for the forwarding tests (../shared/PLATFORM.md, "A real OpenSSH server on
loopback"): Debian's sshd started as an ordinary process in front (-D), each with a throwaway host key, its own port
and its own config; one client key and one ssh client config (`Host` blocks with `HostKeyAlias`) name them as hosts.
The remote side is this same machine: a remote command runs as root under sshd, with sshd's environment (no
XDG_RUNTIME_DIR, SSH_CONNECTION set), which is what makes it a remote host to authctl. The hosts' `bin` directory,
where a test copies authctl as a person copies it to a host, is first on PATH there: sshd sets PATH and HOME (the
hosts' own `home`, not root's) with `SetEnv` for a remote command, and that home's .profile sets PATH again for a
login shell (which /etc/profile gives the system's). A host whose sshd accepts no
AUTH_AGENT_SOCKET runs in a mount namespace with a /tmp of its own (`unshare -m`), as another machine has: authctl
there finds its forward in that /tmp only, never one of a test running beside it."""
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

from conftest import free_port, short_tmpdir, stop_popen, wait_for

SSHD = "/usr/sbin/sshd"
SUPERUSER_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
SSH = "/usr/bin/ssh"


def keygen(path: Path):
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "", "-f", str(path)], check=True,
                   stdin=subprocess.DEVNULL, timeout=30)


def fingerprint(public_key: Path) -> str:
    """`SHA256:...`, as ssh prints it: docs/INTEGRATIONS.md's `ssh-keygen -lf` of the host's public key."""
    out = subprocess.run(["ssh-keygen", "-lf", str(public_key)], capture_output=True,
                         text=True, check=True, timeout=30).stdout
    return out.split()[1]


class SSHServer:
    """One sshd on 127.0.0.1 standing for host `name`."""

    def __init__(self, base: Path, name: str, authorized_key: Path, accept_env: bool, stream_forwarding: bool = True):
        assert os.access(SSHD, os.X_OK), "openssh-server is not installed: run scripts/setup"
        self.base = base
        self.name = name
        self.port = free_port()
        self.authorized_key = authorized_key
        self.accept_env = accept_env
        self.stream_forwarding = stream_forwarding
        # The host's /tmp, as this machine sees it; None: the machine's own (the host accepts AUTH_AGENT_SOCKET).
        self.tmp = None if accept_env else short_tmpdir(f"aa-{name}-tmp-")
        if self.tmp is not None:
            self.tmp.chmod(0o1777)
        self.log_path = base / f"sshd-{name}.log"
        self.proc: subprocess.Popen | None = None
        self.new_host_key()

    def new_host_key(self):
        """A fresh host key (the host was reinstalled, or someone else answers at its address)."""
        self.host_key = self.base / f"{self.name}-host-key-{time.monotonic_ns()}"
        keygen(self.host_key)
        self.fingerprint = fingerprint(Path(f"{self.host_key}.pub"))

    def known_hosts_line(self) -> str:
        return f"{self.name} " + " ".join(Path(f"{self.host_key}.pub").read_text().split()[:2])

    def start(self):
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # its privilege separation directory
        config = self.base / f"sshd-{self.name}.conf"
        config.write_text("\n".join([
            f"Port {self.port}", "ListenAddress 127.0.0.1", f"HostKey {self.host_key}",
            f"AuthorizedKeysFile {self.authorized_key}", "StrictModes no", "UsePAM no",
            "PasswordAuthentication no", "KbdInteractiveAuthentication no", "PermitRootLogin prohibit-password",
            f"PidFile {self.base}/sshd-{self.name}.pid", f"AllowStreamLocalForwarding {'yes' if self.stream_forwarding else 'no'}",
            *(["AcceptEnv AUTH_AGENT_SOCKET"] if self.accept_env else []), "LogLevel VERBOSE",
            f"SetEnv HOME={self.base / 'home'} PATH={self.base / 'bin'}:{SUPERUSER_PATH}", ""]))
        sshd = [SSHD, "-D", "-f", str(config), "-E", str(self.log_path)]
        if self.tmp is not None:
            # Its own /tmp (where ssh puts the forward's socket), in a mount namespace of its own, with this fixture's
            # directory (its keys and config, the test's scripts) still at its path there; sshd replaces sh.
            inner = self.tmp / self.base.name
            inner.mkdir(exist_ok=True)
            sshd = ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c",
                    'mount --bind "$1" "$2" && mount --rbind "$0" /tmp && shift 3 && exec "$@"',
                    str(self.tmp), str(self.base), str(inner), "--", *sshd]
        self.proc = subprocess.Popen(sshd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

        def listening():
            assert self.proc.poll() is None, f"sshd for {self.name} exited: {self.log()}"
            with socket.socket() as probe:
                return probe.connect_ex(("127.0.0.1", self.port)) == 0

        wait_for(listening, 20, f"sshd for {self.name} to listen")

    def stop(self):
        if self.proc is not None:
            stop_popen(self.proc)
            self.proc = None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


class SSHHosts:
    """Two hosts, `hosta` (its sshd accepts AUTH_AGENT_SOCKET) and `hostb` (accepts no variable: authctl there finds
    the forward by itself), a third, `nofwd`, whose sshd refuses stream-local forwarding, and the ssh client config
    naming them (`ssh -F config`)."""

    def __init__(self, base: Path):
        self.base = base
        (base / "bin").mkdir()  # first on the hosts' PATH
        (base / "home").mkdir()
        (base / "home" / ".profile").write_text(f'PATH="{base / "bin"}:$PATH"\n')
        self.client_key = base / "client-key"
        keygen(self.client_key)
        self.authorized = base / "authorized_keys"
        self.authorized.write_text(Path(f"{self.client_key}.pub").read_text())
        self.known_hosts = base / "known_hosts"
        self.config = base / "ssh_config"
        self.hosts = {"hosta": SSHServer(base, "hosta", self.authorized, accept_env=True),
                      "hostb": SSHServer(base, "hostb", self.authorized, accept_env=False),
                      "nofwd": SSHServer(base, "nofwd", self.authorized, accept_env=False, stream_forwarding=False)}
        for server in self.hosts.values():
            server.start()
        self.write_client_config()

    def __getitem__(self, name: str) -> SSHServer:
        return self.hosts[name]

    def write_client_config(self):
        """The client config, and known_hosts holding each host's current key (as if the user had accepted it)."""
        self.known_hosts.write_text("".join(server.known_hosts_line() + "\n" for server in self.hosts.values()))
        blocks = []
        for name, server in self.hosts.items():
            blocks += [f"Host {name}", "  HostName 127.0.0.1", f"  Port {server.port}", f"  HostKeyAlias {name}",
                       "  User root", f"  IdentityFile {self.client_key}", "  IdentitiesOnly yes",
                       f"  UserKnownHostsFile {self.known_hosts}", "  GlobalKnownHostsFile /dev/null",
                       "  StrictHostKeyChecking yes", "  BatchMode yes", "  LogLevel ERROR", ""]
        self.config.write_text("\n".join(blocks))

    def plain_config(self, alias: str, name: str) -> Path:
        """A client config as a person writes one (issue 54): `Host ALIAS` with HostName and Port, no HostKeyAlias,
        and a known_hosts file holding host `name`'s current key under ssh's own name for it, `[127.0.0.1]:PORT`.
        Written again after a rekey; returns the config's path (`ssh -F`)."""
        server = self.hosts[name]
        known = self.base / f"known_hosts-{alias}"
        known.write_text(f"[127.0.0.1]:{server.port} " + " ".join(Path(f"{server.host_key}.pub").read_text().split()[:2]) + "\n")
        config = self.base / f"ssh_config-{alias}"
        config.write_text("\n".join([
            f"Host {alias}", "  HostName 127.0.0.1", f"  Port {server.port}", "  User root",
            f"  IdentityFile {self.client_key}", "  IdentitiesOnly yes", f"  UserKnownHostsFile {known}",
            "  GlobalKnownHostsFile /dev/null", "  StrictHostKeyChecking yes", "  BatchMode yes", "  LogLevel ERROR", ""]))
        return config

    def install(self, authctl: Path) -> str:
        """Copies `authctl` into the directory first on the hosts' PATH (replacing, never overwriting in place, a copy
        a host may be running); returns the name a person types there."""
        staged = self.base / "bin" / ".authctl.new"
        shutil.copy2(authctl, staged)
        os.replace(staged, self.base / "bin" / "authctl")
        return "authctl"

    def rekey(self, name: str):
        """Host `name` answers with a new host key, which the user accepted (known_hosts updated)."""
        server = self.hosts[name]
        server.stop()
        server.new_host_key()
        server.start()
        self.write_client_config()

    def stop(self):
        for server in self.hosts.values():
            server.stop()
