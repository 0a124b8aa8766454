"""The watchdog: a SIGSTOPped agent stops pinging; systemd kills it (SIGABRT, with SIGCONT) and Restart=on-failure
starts a new one. So does an agent whose accept loop alone is stuck while its other threads run on. A runtime drop-in
(under $XDG_RUNTIME_DIR, not in the home tree) shortens WatchdogSec for this."""
import subprocess

import pytest

from conftest import ensure_running
from e2e_helpers import wait_for
from user_session import REPO_INSIDE

WATCHDOG_SEC = 3


@pytest.fixture
def short_watchdog(user, installed):
    dropin = f"{user.runtime_dir}/systemd/user/auth-agent.service.d/50-test-watchdog.conf"
    user.write_file(dropin, f"[Service]\nWatchdogSec={WATCHDOG_SEC}\n", mode="644")
    user.check("systemctl --user daemon-reload && systemctl --user restart auth-agent.service")
    yield
    # Three starts in a few seconds: reset the start-limit counter, or the next file's starts could trip it.
    user.check(f"rm -f {dropin} && systemctl --user daemon-reload && systemctl --user restart auth-agent.service "
               "&& systemctl --user reset-failed auth-agent.service")


def test_watchdog_restarts_a_stopped_agent(user, short_watchdog):
    old = ensure_running(user)
    assert user.show("auth-agent.service", "WatchdogUSec") == f"{WATCHDOG_SEC}s"
    restarts = int(user.show("auth-agent.service", "NRestarts"))
    cursor = user.journal_cursor()
    user.check(f"kill -STOP {old}")
    try:
        # WatchdogSec, then RestartSec=2 and the new agent's start-up.
        wait_for(lambda: user.main_pid() not in (0, old) and user.is_active("auth-agent.service") == "active",
                 WATCHDOG_SEC + 20, "a new agent after the watchdog timeout", interval=0.2)
    finally:
        if user.run(f"test -d /proc/{old}").returncode == 0:  # never leave a stopped agent behind
            user.run(f"kill -KILL {old}")
    assert int(user.show("auth-agent.service", "NRestarts")) == restarts + 1
    journal = user.journal("-u", "auth-agent.service", "-o", "cat", after=cursor)
    assert "Watchdog timeout" in journal, "no 'Watchdog timeout' in the unit's journal (stage logs: journal.txt)"
    assert user.run("authctl status", timeout=15).returncode == 0


def test_watchdog_restarts_an_agent_whose_accept_loop_is_stuck(user, short_watchdog, container):
    """The thread that serves every socket client (`auth-accept`) is stopped alone, as a lookup stuck in the kernel
    would hold it; the agent's other threads (the watchdog's among them) run on. The watchdog must see that the loop
    no longer answers, stop pinging, and systemd restart the agent; clients are answered again afterwards."""
    old = ensure_running(user)
    assert user.run("authctl status", timeout=15).returncode == 0
    restarts = int(user.show("auth-agent.service", "NRestarts"))
    cursor = user.journal_cursor()
    freezer = subprocess.Popen(container.command(["python3", f"{REPO_INSIDE}/Tests/usermanager/freeze_thread.py",
                                                  str(old), "auth-accept"], timeout=WATCHDOG_SEC + 40),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    try:
        line = freezer.stdout.readline()
        assert line.startswith("frozen"), f"the accept loop was not stopped: {line!r} {freezer.stderr.read()[-500:]}"
        wait_for(lambda: user.main_pid() not in (0, old) and user.is_active("auth-agent.service") == "active",
                 WATCHDOG_SEC + 20, "a new agent after the watchdog timeout", interval=0.2)
    finally:
        if user.run(f"test -d /proc/{old}").returncode == 0:
            user.run(f"kill -KILL {old}")
        freezer.kill()
        freezer.wait(timeout=10)
    assert int(user.show("auth-agent.service", "NRestarts")) == restarts + 1
    journal = user.journal("-u", "auth-agent.service", "-o", "cat", after=cursor)
    assert "Watchdog timeout" in journal, "no 'Watchdog timeout' in the unit's journal (stage logs: journal.txt)"
    assert "did not answer its own health probe" in journal, "the agent did not say why it stopped pinging"
    assert user.run("authctl status", timeout=15).returncode == 0
