"""Idle exit: under systemd the agent exits after `idle_exit` seconds without clients (a clean exit, not a
failure), whether a socket client or a D-Bus call started it, and the next request starts it again."""
import pytest

from conftest import write_config
from e2e_helpers import wait_for

IDLE_EXIT = 3
CALL = "busctl --user --timeout=20 call dev.authagent.Agent /dev/authagent/Agent1 dev.authagent.Agent1"


@pytest.fixture
def short_idle_exit(user, installed, auth_server):
    user.check("systemctl --user stop auth-agent.service")
    write_config(user, auth_server, idle_exit=IDLE_EXIT)
    yield
    write_config(user, auth_server)
    # Each case starts the unit three times within seconds: with the next file's starts, that would trip the
    # default start limit (5 starts in 10 s), which fails the socket too (reported to the lead as a finding).
    user.check("systemctl --user stop auth-agent.service && systemctl --user reset-failed auth-agent.service")


def wait_idle_exit(user, pid: int):
    wait_for(lambda: user.is_active("auth-agent.service") == "inactive", IDLE_EXIT + 15,
             f"the agent (pid {pid}) to exit after idle_exit = {IDLE_EXIT}", interval=0.2)
    assert user.show("auth-agent.service", "Result") == "success"
    assert user.show("auth-agent.service", "ExecMainStatus") == "0"
    assert user.is_active("auth-agent.socket") == "active", "the socket must keep listening for the next client"


@pytest.mark.parametrize("started_by", ["socket", "dbus"])
def test_idle_exit_and_reactivation(user, short_idle_exit, started_by):
    start = "authctl status" if started_by == "socket" else f"{CALL} GetStatus"
    assert user.run(start, timeout=15).returncode == 0
    first = user.main_pid()
    assert first > 0
    wait_idle_exit(user, first)
    result = user.run("authctl status", timeout=15)
    assert result.returncode == 0, f"authctl status after the idle exit failed: {result.stderr.strip()}"
    assert user.is_active("auth-agent.service") == "active"
    assert user.main_pid() not in (0, first)


def test_a_memory_only_sign_in_holds_off_the_idle_exit_until_it_is_signed_out(user, installed, auth_server):
    """`store = "memory"` under the real user manager: a sign-in the agent holds only in memory keeps a
    socket-activated agent up past `idle_exit` (it would lose the sign-in), and `systemctl --user status` says why;
    once the sign-out forgets it, the idle exit is back. (No Secret Service at all is the e2e stage's: here Debian's
    gnome-keyring is D-Bus-activatable, which is what most users have.)"""
    user.check("systemctl --user stop auth-agent.service")
    write_config(user, auth_server, idle_exit=IDLE_EXIT, store="memory")
    try:
        items_before = user.keyring_items(account="work")  # the sign-in module's item, if it ran
        cursor = user.journal_cursor()
        login = user.run("authctl login work", timeout=60)
        assert login.returncode == 0, login.stderr
        assert "kept in memory until the agent stops" in login.stdout, login.stdout
        pid = user.main_pid()
        wait_for(lambda: "kept in memory only, so no idle exit: work" in user.show("auth-agent.service", "StatusText"),
                 10, "the STATUS line to say why the agent stays")
        wait_for(lambda: "idle, but a sign-in lives in memory only" in user.journal("-u", "auth-agent.service",
                                                                                     after=cursor),
                 IDLE_EXIT + 15, "the idle exit to be held off", interval=0.5)
        assert user.is_active("auth-agent.service") == "active" and user.main_pid() == pid
        assert user.keyring_items(account="work") == items_before, "store = memory wrote to the keyring"
        token = user.run("authctl token work", timeout=20)
        assert token.returncode == 0 and len(token.stdout.strip()) > 16, token.stderr

        assert user.run("authctl logout work", timeout=30).returncode == 0
        wait_idle_exit(user, pid)
    finally:
        write_config(user, auth_server)
        user.check("systemctl --user stop auth-agent.service && systemctl --user reset-failed auth-agent.service")
