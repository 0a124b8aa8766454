"""`make install` under a real user manager: the socket is enabled and listening, the agent starts on its first
client (socket activation) and tells systemd it is ready (Type=notify) with a STATUS= line."""
import stat

import pytest

from conftest import ensure_running


def test_install_enables_and_listens_on_the_socket_only(user, installed):
    assert "enabled auth-agent.socket" in installed["output"]
    assert user.show("auth-agent.socket", "UnitFileState") == "enabled"
    assert user.is_active("auth-agent.socket") == "active"
    sock = user.host_path(f"{user.runtime_dir}/auth-agent/agent.sock")
    mode = sock.stat().st_mode
    assert stat.S_ISSOCK(mode) and stat.S_IMODE(mode) == 0o600, f"agent.sock mode {oct(mode)}"
    assert stat.S_IMODE(sock.parent.stat().st_mode) == 0o700


def test_first_authctl_status_activates_the_agent(user, installed):
    assert user.is_active("auth-agent.service") == "inactive", "the agent ran before any client asked"
    result = user.run("authctl status", timeout=15)
    assert result.returncode == 0, f"authctl status failed ({result.returncode}): {result.stderr.strip()}"
    assert "work" in result.stdout
    assert user.is_active("auth-agent.service") == "active"
    assert user.main_pid() > 0
    assert "auth-agent.socket" in user.show("auth-agent.service", "TriggeredBy").split()


def test_notify_ready_and_status_line(user, installed):
    ensure_running(user)
    assert user.show("auth-agent.service", "Type") == "notify"
    # A Type=notify unit is "active" only after READY=1 (before it, "activating"); systemd logs "Started" then.
    assert user.show("auth-agent.service", "ActiveState") == "active"
    assert "Started auth-agent.service" in user.journal("-u", "auth-agent.service", "-o", "cat")
    text = user.show("auth-agent.service", "StatusText")
    assert text.startswith("Serving 1 account"), f"STATUS= line: {text!r}"
    status = user.systemctl("status", "auth-agent.service", "--no-pager", "--lines=0").stdout
    assert f'Status: "{text}"' in status, status


def test_unit_is_ordered_after_the_session_bus(user, installed):
    """Issue 19 (e): at logout the agent stops before the session bus, so a keyring write in flight completes."""
    assert "dbus.socket" in user.show("auth-agent.service", "After").split()
