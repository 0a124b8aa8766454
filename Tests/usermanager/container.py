"""The host's own Debian tree booted as a systemd-nspawn container, with systemd as PID 1 (../shared/PLATFORM.md,
"A real systemd user manager"): a private mount namespace binds / onto an empty directory and hides the host's /run
under a tmpfs (nspawn refuses to clean a /run on disk); `--volatile=overlay` sends every write to a tmpfs, so the
container changes nothing on the host and vanishes with its PID 1. The host network is shared: a loopback server on
the host is reachable from inside.
"""
from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from e2e_helpers import pid_alive, wait_for

# Units of the host tree that a test container does not need: services the host happens to have, timers, gettys.
# Masking a unit that does not exist is harmless, so the list can name what other machines of the class have.
MASKED_UNITS = [
    "getty@tty1.service", "console-getty.service", "systemd-timesyncd.service", "systemd-pstore.service",
    "e2scrub_reap.service", "cron.service", "ssh.service", "exim4.service", "rsyslog.service", "dovecot.service",
    "postgresql.service", "apt-daily.timer", "apt-daily-upgrade.timer", "dpkg-db-backup.timer", "e2scrub_all.timer",
    "fstrim.timer", "man-db.timer", "systemd-tmpfiles-clean.timer", "unattended-upgrades.service",
    # The container shares the host's network: nothing in it may configure interfaces, routes or DNS.
    "networking.service", "ifup@.service", "systemd-networkd.service", "systemd-networkd-wait-online.service",
    "systemd-resolved.service", "NetworkManager.service", "docker.service", "containerd.service",
]
HOST_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class Container:
    """One booted container. `binds` maps host paths to container paths (read-only), `rw_binds` the same, writable."""

    def __init__(self, base: Path, binds: dict[str, str], rw_binds: dict[str, str]):
        self.base = base
        self.root = base / "root"
        self.console = base / "console.log"
        self.binds = binds
        self.rw_binds = rw_binds
        self.proc: subprocess.Popen | None = None
        self.pid1: int | None = None
        self.boot_seconds: float | None = None

    # -- life cycle

    def boot(self, timeout: float = 60):
        started = time.monotonic()
        self.root.mkdir(mode=0o700)
        args = ["systemd-nspawn", "-D", str(self.root), "--volatile=overlay", "--register=no", "--keep-unit",
                "--quiet", "-b"]
        args += [f"--bind-ro={host}:{inside}" for host, inside in self.binds.items()]
        args += [f"--bind={host}:{inside}" for host, inside in self.rw_binds.items()]
        args += [f"systemd.mask={unit}" for unit in MASKED_UNITS]
        # unshare execs sh, which execs nspawn: self.proc.pid is nspawn's pid, and the mount namespace dies with it.
        script = (f'mount --bind / "{self.root}" && mount -t tmpfs -o mode=0755 tmpfs /run && exec "$@"')
        env = {"PATH": HOST_PATH, "LANG": "C.UTF-8", "SYSTEMD_NSPAWN_UNIFIED_HIERARCHY": "1"}
        with open(self.console, "ab") as log:
            self.proc = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sh", "-c", script,
                                          "sh", *args], env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                         start_new_session=True)
        self.pid1 = wait_for(self._find_pid1, timeout, "the container's PID 1 (systemd)", interval=0.05)
        # Until PID 1 has its private socket, systemctl fails at once with no state: ask again.
        remaining = max(5.0, timeout - (time.monotonic() - started))
        state = wait_for(lambda: self.run(["systemctl", "is-system-running", "--wait"],
                                          timeout=remaining).stdout.strip(), remaining, "the container to boot",
                         interval=0.1)
        if state not in ("running", "degraded"):
            raise AssertionError(f"the container did not boot (state {state!r}):\n{self.console_tail()}")
        if state == "degraded":
            failed = self.run(["systemctl", "--failed", "--no-legend", "--plain"]).stdout
            print(f"container booted degraded; failed units:\n{failed}")
        self.boot_seconds = time.monotonic() - started
        return self

    def _find_pid1(self):
        if self.proc.poll() is not None:
            raise AssertionError(f"systemd-nspawn exited with {self.proc.returncode}:\n{self.console_tail()}")
        try:
            children = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text().split()
        except FileNotFoundError:
            return None
        for child in children:
            try:
                if Path(f"/proc/{child}/comm").read_text().strip() == "systemd":
                    return int(child)
            except FileNotFoundError:
                continue
        return None

    def stop(self, timeout: float = 20):
        """An orderly shutdown (nspawn turns SIGTERM into SIGRTMIN+3 for PID 1), then SIGKILL to PID 1 (which
        ends the whole PID namespace) and nspawn. Asserts that both are gone; the bind directory is removed."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                print(f"container did not shut down within {timeout} s: killing PID 1 ({self.pid1})")
                if self.pid1 and pid_alive(self.pid1):
                    os.kill(self.pid1, signal.SIGKILL)
                self.proc.kill()
                self.proc.wait(timeout=10)
        if self.pid1:
            wait_for(lambda: not pid_alive(self.pid1), 10, f"the container's PID 1 ({self.pid1}) to exit")
        self.proc = None
        # Only the (empty) mount point is left; the overlay and its tmpfs went with the mount namespace.
        self.root.rmdir()

    def console_tail(self, chars: int = 3000) -> str:
        return self.console.read_text(errors="replace")[-chars:] if self.console.exists() else ""

    # -- commands

    def command(self, argv: list[str], timeout: float) -> list[str]:
        """argv for running `argv` as root in every namespace of the container, killed after `timeout` s (inside,
        by timeout(1), so that no process survives the caller's timeout)."""
        assert self.pid1, "the container is not running"
        return ["nsenter", "-t", str(self.pid1), "-a", "--", "timeout", "-k", "3", str(timeout), *argv]

    def run(self, argv: list[str], input: str | None = None, timeout: float = 30,
            check: bool = False) -> subprocess.CompletedProcess:
        result = subprocess.run(self.command(argv, timeout), input=input, capture_output=True, text=True,
                                timeout=timeout + 10, env={"PATH": HOST_PATH, "LANG": "C.UTF-8"},
                                stdin=None if input is not None else subprocess.DEVNULL)
        if check:
            assert result.returncode == 0, f"{argv[0]} failed ({result.returncode}): {result.stderr.strip()}"
        return result

    def path(self, inside: str) -> Path:
        """A container path as the host sees it (through PID 1's root)."""
        return Path(f"/proc/{self.pid1}/root") / inside.lstrip("/")
