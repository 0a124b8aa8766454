"""An ordinary user of the container with a PAM login session: logind starts user@UID.service (the user manager,
its session bus, Debian's socket-activated gnome-keyring), as on a desktop login. Commands run as that user through
`su -l`, which opens a PAM session of its own, so they get XDG_RUNTIME_DIR, DBUS_SESSION_BUS_ADDRESS and the PATH
of a login shell (~/.profile adds ~/.local/bin), like a terminal would.
"""
from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
from pathlib import Path

from e2e_helpers import pid_alive, wait_for

REPO_INSIDE = "/srv/auth-agent"  # where the container binds the repository (read-only)
LOGIN_COLLECTION = "/org/freedesktop/secrets/collection/login"


class UserSession:
    def __init__(self, container, name: str):
        self.container = container
        self.name = name
        self.uid: int | None = None
        self.session: subprocess.Popen | None = None

    @property
    def home(self) -> str:
        return f"/home/{self.name}"

    @property
    def runtime_dir(self) -> str:
        return f"/run/user/{self.uid}"

    def host_path(self, inside: str) -> Path:
        return self.container.path(inside)

    # -- account and login session

    def create(self):
        self.container.run(["useradd", "--create-home", "--shell", "/bin/bash", self.name], check=True)
        self.uid = int(self.container.run(["id", "-u", self.name], check=True).stdout)
        return self

    def login(self, timeout: float = 30):
        """Opens the PAM session (`su -l USER -c 'exec sleep infinity'`) and waits for the user manager."""
        assert self.session is None or self.session.poll() is not None, "already logged in"
        self.session = subprocess.Popen(self.container.command(["su", "-l", self.name, "-c", "exec sleep infinity"],
                                                               timeout=3600),
                                        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL, start_new_session=True)
        wait_for(lambda: self.container.run(["systemctl", "is-active", f"user@{self.uid}.service"]).stdout.strip()
                 == "active", timeout, f"user@{self.uid}.service to start", interval=0.1)
        state = self.run("systemctl --user is-system-running --wait", timeout=timeout).stdout.strip()
        assert state == "running", f"the user manager is {state!r}: " + self.run(
            "systemctl --user --failed --no-legend --plain").stdout
        return self

    def logout(self, timeout: float = 25):
        """Ends the login session as closing its terminal does: SIGTERM to `su`, which passes it on to its command
        and closes the PAM session. With no session left, logind stops user@UID after UserStopDelaySec (10 s);
        `timeout` counts from the SIGTERM. Returns user@UID's Result."""
        assert self.session is not None
        su = [int(pid) for pid in self._descendants(self.session.pid)
              if Path(f"/proc/{pid}/comm").read_text().strip() == "su"]
        assert su, "no su process under the login session's nsenter"
        for pid in su:
            os.kill(pid, signal.SIGTERM)
        try:
            self.session.wait(timeout=15)
        finally:
            if self.session.poll() is None:
                self.session.kill()
                self.session.wait(timeout=5)
        self.session = None
        wait_for(lambda: self.container.run(["systemctl", "is-active", f"user@{self.uid}.service"]).stdout.strip()
                 in ("inactive", "failed"), timeout, f"user@{self.uid}.service to stop after logout", interval=0.2)
        return self.container.run(["systemctl", "show", f"user@{self.uid}.service", "-p", "Result",
                                   "--value"]).stdout.strip()

    @staticmethod
    def _descendants(pid: int) -> list[int]:
        found, queue = [], [pid]
        while queue:
            current = queue.pop()
            try:
                children = Path(f"/proc/{current}/task/{current}/children").read_text().split()
            except FileNotFoundError:
                continue
            found += [int(c) for c in children]
            queue += [int(c) for c in children]
        return found

    def user_manager_state(self) -> str:
        return self.container.run(["systemctl", "is-active", f"user@{self.uid}.service"]).stdout.strip()

    def end(self):
        """Teardown: stops the agent while the session bus is still there (at logout it can hang: see
        test_9_logout_uninstall.py), then kills what is left of the login session; the container's shutdown does
        the rest."""
        if self.session is not None and self.session.poll() is None:
            self.run("systemctl --user stop auth-agent.service", timeout=20)
            for pid in self._descendants(self.session.pid):
                if pid_alive(pid):
                    os.kill(pid, signal.SIGTERM)
            try:
                self.session.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.session.kill()
                self.session.wait(timeout=5)
        self.session = None

    # -- commands as the user

    def run(self, script: str, input: str | None = None, timeout: float = 30) -> subprocess.CompletedProcess:
        """Runs a shell command line as the user, in a login shell of a new PAM session, killed after `timeout`."""
        return self.container.run(["su", "-l", self.name, "-c", script], input=input, timeout=timeout)

    def check(self, script: str, input: str | None = None, timeout: float = 30) -> str:
        result = self.run(script, input=input, timeout=timeout)
        assert result.returncode == 0, f"`{script}` failed ({result.returncode}): {result.stderr.strip()[-2000:]}"
        return result.stdout

    def write_file(self, path: str, text: str, mode: str = "600"):
        q = shlex.quote(path)
        self.check(f"umask 077 && mkdir -p \"$(dirname {q})\" && cat > {q} && chmod {mode} {q}", input=text)

    # -- systemd

    def systemctl(self, *args: str, timeout: float = 30) -> subprocess.CompletedProcess:
        return self.run("systemctl --user " + shlex.join(args), timeout=timeout)

    def show(self, unit: str, prop: str) -> str:
        return self.check(f"systemctl --user show {shlex.quote(unit)} -p {prop} --value").strip()

    def is_active(self, unit: str) -> str:
        return self.systemctl("is-active", unit).stdout.strip()

    def main_pid(self, unit: str = "auth-agent.service") -> int:
        return int(self.show(unit, "MainPID"))

    def wait_active(self, unit: str, timeout: float, state: str = "active"):
        wait_for(lambda: self.is_active(unit) == state, timeout, f"{unit} to be {state}", interval=0.1)

    def journal_cursor(self) -> str:
        """The user journal's current end, to read only what comes after it (`journal(after=...)`)."""
        out = self.check("journalctl --user -n 1 --show-cursor --no-pager -q -o cat")
        lines = [line for line in out.splitlines() if line.startswith("-- cursor: ")]
        return lines[-1].removeprefix("-- cursor: ") if lines else ""

    def journal(self, *args: str, after: str | None = None) -> str:
        """The user's own journal (`journalctl --user`), as the user reads it."""
        cursor = ["--after-cursor", after] if after else []
        return self.check("journalctl --user --no-pager -q " + shlex.join([*cursor, *args]), timeout=30)

    # -- the keyring of the login session

    def unlock_keyring(self, password: str):
        """Creates (first login) or unlocks the `login` collection through gnome-keyring's control socket."""
        self.check(f"python3 {REPO_INSIDE}/Tests/e2e/keyring_unlock.py", input=password)

    def keyring_state(self) -> tuple[str, str]:
        """(`default` alias, `Locked` of the login collection) as the Secret Service answers them."""
        alias = self.run("busctl --user call org.freedesktop.secrets /org/freedesktop/secrets "
                         "org.freedesktop.Secret.Service ReadAlias s default").stdout.strip()
        locked = self.run(f"busctl --user get-property org.freedesktop.secrets {LOGIN_COLLECTION} "
                          "org.freedesktop.Secret.Collection Locked").stdout.strip()
        return alias, locked

    def keyring_items(self, **attributes: str) -> list[str]:
        """Object paths of the items matching `attributes`, in any collection, locked or not (Secret Service
        SearchItems: paths only, never a secret)."""
        pairs = [part for key, value in attributes.items() for part in (key, value)]
        out = self.check("busctl --user call org.freedesktop.secrets /org/freedesktop/secrets "
                         "org.freedesktop.Secret.Service SearchItems 'a{ss}' "
                         + shlex.join([str(len(attributes)), *pairs]))
        return re.findall(r'"(/[^"]*)"', out)

    # -- the user's files

    def tree(self) -> set[str]:
        """Every file and symlink under the home directory (relative paths), as the host sees the container."""
        home = self.host_path(self.home)
        found = set()
        for root, dirs, files in os.walk(home):
            for name in files + [d for d in dirs if os.path.islink(os.path.join(root, d))]:
                found.add(os.path.relpath(os.path.join(root, name), home))
        return found
