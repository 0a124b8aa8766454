"""The device authorization grant (RFC 8628) end to end: the real agent and authctl, the real keyring, the Django
OAuth Toolkit server (its device flow; the test plays the person on another device and approves or denies the user
code), and the fault proxy in front of the token endpoint to inject `slow_down` and `expired_token`.

The fixture server's metadata has no `device_authorization_endpoint`, so the accounts here set it explicitly."""
import json
import re
import subprocess
import sys

import pytest

from conftest import FIXTURES, default_account, read_until, wait_for
from faultproxy import FaultProxy

sys.path.insert(0, str(FIXTURES / "authserver"))
from selftest import approve_device  # noqa: E402  (the fixture's own "person approves the code" steps)

pytestmark = pytest.mark.release  # also run against the installed package (scripts/test)

DEVICE_CLIENT = "auth-agent-test-device"
CODE_RE = re.compile(r"enter the code:\s+(\S+)")
# Slack for scheduling on a loaded 2-core machine; the rule under test is a 5 s step.
TOLERANCE = 0.5


@pytest.fixture
def proxy(auth_server):
    p = FaultProxy(auth_server.base).start()
    yield p
    p.stop()


def device_account(server, proxy=None, **extra) -> dict:
    token = (proxy.base if proxy else server.base) + "/o/token/"
    keys = {"client_id": DEVICE_CLIENT, "token_endpoint": token,
            "device_authorization_endpoint": server.base + "/o/device-authorization/"}
    keys.update(extra)
    return default_account(server.issuer, **keys)


def approve(server, user_code: str, action: str = "accept"):
    """The person's side (RFC 8628 §3.3) on another device: log in, enter the user code, accept or deny (the
    fixture's own self-test steps)."""
    approve_device(server.base, user_code, action)


def start_login(agent, *args, env=None):
    proc = subprocess.Popen([str(agent.bins / "authctl"), "login", *args, "work"], env=env or agent.env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    shown = read_until(proc.stderr, "Waiting for you to approve", 30)
    m = CODE_RE.search(shown)
    assert m, f"no user code shown:\n{shown}"
    return proc, m.group(1), shown


def finish(proc, timeout=60):
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=10)
    return proc.returncode, out, err


def canned(error: str) -> tuple[int, str, bytes]:
    return 400, "application/json", json.dumps({"error": error}).encode()


def test_device_sign_in_honours_slow_down_and_stores_the_refresh_token(make_agent, keyring, auth_server, proxy):
    agent = make_agent(accounts={"work": device_account(auth_server, proxy)})
    # The first poll is told to slow down; the later ones reach the real server.
    proxy.script("/o/token/", [canned("slow_down")])
    proc, user_code, shown = start_login(agent, "--device")
    assert f"{auth_server.base}/o/device/" in shown
    assert agent.browser_runs() == 0, "a device sign-in started a browser"
    assert agent.account_status("work")["login_pending"] is True
    # Wait until the agent has polled after the slow_down at least once (authorization_pending), then approve.
    wait_for(lambda: len(proxy.times_of("/o/token/")) >= 2, 30, "two token polls")
    approve(auth_server, user_code, "accept")
    rc, out, err = finish(proc)
    assert rc == 0, err
    assert "Signed in to 'work'" in out

    polls = proxy.times_of("/o/token/")
    assert len(polls) >= 3, polls
    gaps = [b - a for a, b in zip(polls, polls[1:])]
    interval = 1  # the fixture's DEVICE_FLOW_INTERVAL
    print(f"device poll gaps after slow_down: {[round(g, 2) for g in gaps]}")
    # The first gap already follows slow_down: interval + 5 s, and every later gap keeps the increase.
    for gap in gaps:
        assert gap >= interval + 5 - TOLERANCE, f"polled {gap:.2f} s after the previous poll; gaps {gaps}"

    rt = keyring.secret_tool_lookup("work", auth_server.issuer, client_id=DEVICE_CLIENT)
    assert rt, "no refresh token in the keyring after the device sign-in"
    agent.remember(rt, user_code)
    token = agent.token("work")
    agent.remember(token)
    assert auth_server.introspect(token).get("active") is True
    assert agent.account_status("work")["login_pending"] is False


def test_a_503_between_polls_is_retried_with_backoff_and_the_sign_in_completes(make_agent, keyring, auth_server, proxy):
    """RFC 8628 stops only on OAuth errors: a server outage mid-sign-in (here two 503s from the fault proxy between
    real polls) is retried with exponential backoff, and the code the person approves still signs in."""
    agent = make_agent(accounts={"work": device_account(auth_server, proxy)})
    outage = (503, "text/html", b"<h1>Service Unavailable</h1>")
    proxy.script("/o/token/", [outage, outage])
    proc, user_code, _ = start_login(agent, "--device")
    wait_for(lambda: len(proxy.times_of("/o/token/")) >= 3, 30, "two 503s and one real poll")
    approve(auth_server, user_code, "accept")
    rc, out, err = finish(proc)
    assert rc == 0, f"a 503 ended the device sign-in: rc {rc}\n{err}"
    assert "Signed in to 'work'" in out

    polls = proxy.times_of("/o/token/")
    gaps = [b - a for a, b in zip(polls, polls[1:])]
    print(f"device poll gaps around two 503s: {[round(g, 2) for g in gaps]}")
    # interval 1 s: after the first 503 wait 2 s, after the second 4 s, then back to the interval.
    assert gaps[0] >= 2 - TOLERANCE, f"retried {gaps[0]:.2f} s after a 503 (backoff 2 s)"
    assert gaps[1] >= 4 - TOLERANCE, f"retried {gaps[1]:.2f} s after a second 503 (backoff 4 s)"
    rt = keyring.secret_tool_lookup("work", auth_server.issuer, client_id=DEVICE_CLIENT)
    assert rt, "no refresh token in the keyring after the device sign-in"
    agent.remember(rt, user_code)


def test_slow_down_adds_five_seconds_to_later_polls_and_denied_stops(make_agent, keyring, auth_server, proxy):
    agent = make_agent(accounts={"work": device_account(auth_server, proxy)})
    proxy.script("/o/token/", [canned("authorization_pending"), canned("slow_down"), canned("access_denied")])
    proc, _, _ = start_login(agent, "--device")
    rc, out, err = finish(proc)
    assert rc == 7, (rc, err)
    assert "denied" in err
    polls = proxy.times_of("/o/token/")
    assert len(polls) == 3, f"polling did not stop on access_denied: {len(polls)} polls"
    first, second = polls[1] - polls[0], polls[2] - polls[1]
    print(f"device poll gaps: pending {first:.2f} s, then after slow_down {second:.2f} s")
    assert first >= 1 - TOLERANCE, f"authorization_pending: polled again after {first:.2f} s (interval 1 s)"
    assert second >= first + 5 - TOLERANCE, f"slow_down: the gap grew from {first:.2f} s to only {second:.2f} s"
    assert agent.status_json()["accounts"][0]["last_error"]["code"] == "access_denied"


def test_expired_and_denied_end_the_sign_in_with_their_codes(make_agent, keyring, auth_server, proxy):
    agent = make_agent(accounts={"work": device_account(auth_server, proxy)})
    proxy.script("/o/token/", [canned("expired_token")])
    proc, _, _ = start_login(agent, "--device")
    rc, _, err = finish(proc)
    assert rc == 7 and "expired" in err, (rc, err)
    assert agent.status_json()["accounts"][0]["last_error"]["code"] == "login_timeout"

    # A real denial at the real server.
    proc, user_code, _ = start_login(agent, "--device")
    approve(auth_server, user_code, "deny")
    rc, _, err = finish(proc)
    assert rc == 7 and "denied" in err, (rc, err)
    assert agent.status_json()["accounts"][0]["last_error"]["code"] == "access_denied"
    assert keyring.secret_tool_lookup("work", auth_server.issuer, client_id=DEVICE_CLIENT) is None


def test_ssh_session_picks_the_device_grant_and_ctrl_c_cancels_it(make_agent, keyring, auth_server):
    agent = make_agent(accounts={"work": device_account(auth_server)})
    env = dict(agent.env, DISPLAY=":0", SSH_CONNECTION="192.0.2.1 50000 192.0.2.2 22")
    proc, user_code, _ = start_login(agent, env=env)
    agent.remember(user_code)
    assert agent.browser_runs() == 0
    proc.terminate()
    finish(proc)
    wait_for(lambda: agent.account_status("work")["login_pending"] is False, 20,
             "the sign-in to end when its only client went away")


def test_desktop_session_keeps_the_browser_and_forced_device_needs_the_grant(make_agent, keyring, auth_server):
    # Same account, desktop environment: the browser flow (the fake browser signs in).
    agent = make_agent(accounts={"work": device_account(auth_server, client_id="auth-agent-test")})
    result = agent.authctl("login", "work", env=dict(agent.env, DISPLAY=":0"))
    assert result.returncode == 0, result.stderr
    assert agent.browser_runs() == 1

    plain = make_agent()  # the fixture's metadata offers no device endpoint
    result = plain.authctl("login", "--device", "work")
    assert result.returncode == 7, result.stderr
    assert "does not offer the device authorization grant" in result.stderr
    result = plain.authctl("login", "--device", "--no-browser", "work")
    assert result.returncode == 2, "conflicting flags are a usage error"


def test_browser_that_cannot_start_falls_back_to_the_device_grant(make_agent, keyring, auth_server, tmp_path):
    empty = tmp_path / "nobin"
    empty.mkdir()
    agent = make_agent(accounts={"work": device_account(auth_server)},
                       env={"BROWSER": str(empty / "no-such-browser"), "PATH": str(empty)})
    proc, user_code, shown = start_login(agent, env=dict(agent.env, DISPLAY=":0", PATH="/usr/bin:/bin"))
    approve(auth_server, user_code, "accept")
    rc, out, err = finish(proc)
    assert rc == 0, err
    rt = keyring.secret_tool_lookup("work", auth_server.issuer, client_id=DEVICE_CLIENT)
    assert rt
    agent.remember(rt, user_code)
