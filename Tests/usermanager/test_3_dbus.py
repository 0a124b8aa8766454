"""D-Bus activation: a call to dev.authagent.Agent on the session bus starts the stopped agent through systemd
(SystemdService=auth-agent.service), and the token comes back from the refresh token in the login keyring."""
from conftest import ensure_running

CALL = "busctl --user --timeout=20 call dev.authagent.Agent /dev/authagent/Agent1 dev.authagent.Agent1"


def test_dbus_call_activates_a_stopped_agent(user, installed):
    old = ensure_running(user)
    user.check("systemctl --user stop auth-agent.service")
    assert user.is_active("auth-agent.service") == "inactive"
    assert user.is_active("auth-agent.socket") == "active"
    result = user.run(f"{CALL} GetStatus", timeout=30)
    assert result.returncode == 0, f"GetStatus over D-Bus failed ({result.returncode}): {result.stderr.strip()}"
    assert '"work"' in result.stdout, result.stdout
    assert user.is_active("auth-agent.service") == "active"
    assert user.main_pid() not in (0, old)


def test_dbus_token_after_activation_comes_from_the_keyring(user, installed):
    """The agent just started has no cached token: GetAccessToken refreshes with the keyring's refresh token."""
    result = user.run(f"{CALL} GetAccessToken su work 60 >/dev/null", timeout=30)
    assert result.returncode == 0, f"GetAccessToken over D-Bus failed ({result.returncode}): {result.stderr.strip()}"
