"""The agent as a D-Bus client of the desktop's notification server: when an account must sign in it shows ONE
notification (not one per failing request), and its "Sign in" button starts the account's browser sign-in. The
notification server is a small fake (Tests/Fixtures/notifications) on the agent's private session bus; the agent,
keyring, authorization server and browser are the real ones."""
import json
import subprocess
import time

import pytest

from conftest import REPO, SYSTEM_PATH, read_until, wait_for

pytestmark = pytest.mark.release  # also run against the installed package (scripts/test)

FAKE = REPO / "Tests" / "Fixtures" / "notifications" / "fake_notifications.py"


@pytest.fixture
def notification_server(keyring, tmp_path):
    log = tmp_path / "notify.jsonl"
    log.touch()
    env = {"PATH": SYSTEM_PATH, "DBUS_SESSION_BUS_ADDRESS": keyring.address, "LANG": "C.UTF-8"}
    proc = subprocess.Popen(["/usr/bin/python3", str(FAKE), str(log), "actions,body"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        read_until(proc.stdout, "ready", 20)
        proc.log = log
        proc.env = env
        yield proc
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def notifications(server) -> list[dict]:
    return [json.loads(line) for line in server.log.read_text().splitlines()]


def agent_bus_barrier(env):
    """Returns once the agent's bus thread has handled every message the bus gave it before this call. The fake
    server emits ActionInvoked before it answers the call that asked for it, the bus keeps one sender's order, and
    sd-bus answers Peer.Ping on the agent's bus thread in the order messages arrived: a signal sent before this
    call was handled (and the agent's decision on it logged) by the time the Ping is answered."""
    out = subprocess.run(["gdbus", "call", "--session", "--dest", "dev.authagent.Agent", "--object-path",
                          "/dev/authagent/Agent1", "--method", "org.freedesktop.DBus.Peer.Ping"], env=env,
                         capture_output=True, text=True, timeout=15)
    assert out.returncode == 0, out.stderr


def test_sign_in_required_shows_one_notification_whose_action_signs_in(
        signed_in_agent, keyring, auth_server, notification_server):
    agent = signed_in_agent
    assert notifications(notification_server) == []
    rt = keyring.secret_tool_lookup("work", auth_server.issuer)
    assert auth_server.revoke(rt) == 200

    assert agent.authctl("token", "work", "--refresh").returncode == 4
    wait_for(lambda: len(notifications(notification_server)) == 1, 10, "the sign-in notification")
    [shown] = notifications(notification_server)
    assert shown["app_name"] == "auth-agent"
    assert shown["summary"] == "Sign in to work"
    assert "'work'" in shown["body"] and "authctl login work" in shown["body"]
    assert "http" not in shown["body"] and rt not in json.dumps(shown)
    assert shown["actions"] == ["sign-in", "Sign in"]

    # A second failing request: still one notification (the agent remembers it was shown).
    assert agent.authctl("token", "work").returncode == 4
    assert agent.account_status("work")["last_error"]["code"] == "login_required"
    time.sleep(1)  # give a (wrong) second Notify the chance to arrive; not a timing assertion
    assert len(notifications(notification_server)) == 1

    # The user clicks "Sign in": the agent starts the browser sign-in itself and the scripted browser completes it.
    browser_runs = agent.browser_log.read_text().count("\n")
    out = subprocess.run(["gdbus", "call", "--session", "--dest", "org.freedesktop.Notifications",
                          "--object-path", "/org/freedesktop/Notifications", "--method", "dev.authagent.Test.Invoke",
                          str(shown["id"]), "sign-in"], env=notification_server.env, capture_output=True, text=True,
                         timeout=15)
    assert out.returncode == 0, out.stderr
    wait_for(lambda: agent.account_status("work")["signed_in"] is True, 30, "the sign-in started from the notification")
    assert agent.browser_log.read_text().count("\n") > browser_runs
    agent.remember(keyring.secret_tool_lookup("work", auth_server.issuer))
    assert agent.token("work")
    assert agent.alive(), agent.log()[-2000:]


def test_action_of_an_unknown_notification_starts_nothing(signed_in_agent, keyring, auth_server, notification_server):
    agent = signed_in_agent
    out = subprocess.run(["gdbus", "call", "--session", "--dest", "org.freedesktop.Notifications",
                          "--object-path", "/org/freedesktop/Notifications", "--method", "dev.authagent.Test.Invoke",
                          "42", "sign-in"], env=notification_server.env, capture_output=True, text=True, timeout=15)
    assert out.returncode == 0, out.stderr
    agent_bus_barrier(notification_server.env)
    assert agent.account_status("work")["login_pending"] is False
    assert "starting a sign-in from the desktop notification" not in agent.stderr_path.read_text()


def test_a_dismissed_notification_no_longer_starts_a_sign_in(signed_in_agent, keyring, auth_server,
                                                               notification_server):
    # NotificationClosed (the user dismissed it): the agent forgets the notification, so an ActionInvoked for its id
    # that arrives afterwards (a stale or forged one) starts nothing.
    agent = signed_in_agent
    assert auth_server.revoke(keyring.secret_tool_lookup("work", auth_server.issuer)) == 200
    assert agent.authctl("token", "work", "--refresh").returncode == 4
    wait_for(lambda: len(notifications(notification_server)) == 1, 10, "the sign-in notification")
    [shown] = notifications(notification_server)
    wait_for(lambda: "sign-in notification shown" in agent.stderr_path.read_text(), 10, "the agent to record it")

    def test_call(method, *args):
        out = subprocess.run(["gdbus", "call", "--session", "--dest", "org.freedesktop.Notifications",
                              "--object-path", "/org/freedesktop/Notifications", "--method",
                              f"dev.authagent.Test.{method}", *args], env=notification_server.env,
                             capture_output=True, text=True, timeout=15)
        assert out.returncode == 0, out.stderr

    test_call("Dismiss", str(shown["id"]))
    test_call("Invoke", str(shown["id"]), "sign-in")
    agent_bus_barrier(notification_server.env)
    assert agent.account_status("work")["login_pending"] is False
    assert "starting a sign-in from the desktop notification" not in agent.stderr_path.read_text()


def test_no_notification_server_is_one_log_line(signed_in_agent, keyring, auth_server):
    agent = signed_in_agent
    assert auth_server.revoke(keyring.secret_tool_lookup("work", auth_server.issuer)) == 200
    assert agent.authctl("token", "work", "--refresh").returncode == 4
    assert agent.authctl("token", "work").returncode == 4
    wait_for(lambda: "no desktop notification shown" in agent.stderr_path.read_text(), 10, "the log line")
    assert agent.stderr_path.read_text().count("no desktop notification shown") == 1
    assert agent.alive(), agent.log()[-2000:]


def test_notifications_can_be_switched_off(make_agent, keyring, auth_server, notification_server):
    agent = make_agent(agent={"notifications": False})
    agent.login("work")
    assert auth_server.revoke(keyring.secret_tool_lookup("work", auth_server.issuer)) == 200
    assert agent.authctl("token", "work", "--refresh").returncode == 4
    time.sleep(1)
    assert notifications(notification_server) == []
