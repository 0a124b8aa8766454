"""Resume from suspend and network-up, end to end: a private dbus-daemon stands in for the system bus
(DBUS_SYSTEM_BUS_ADDRESS), with a fake logind and a fake NetworkManager on it (Tests/Fixtures/systembus); the
agent, keyring, Django OAuth Toolkit and browser are the real ones, and the fault proxy sits in front of the token
endpoint to hold requests or make the server unreachable. Nothing here asserts on elapsed time: the order of what
the proxy and the agent saw is the evidence."""
import subprocess
import time

import pytest

from conftest import REPO, SYSTEM_PATH, read_until, stop_popen, wait_for
from test_hostile import fault_proxy, proxied_agent  # noqa: F401 (fixture)

FAKE = REPO / "Tests" / "Fixtures" / "systembus" / "fake_system_services.py"
TOKEN_PATH = "/o/token/"


class SystemBus:
    """A dbus-daemon used as the system bus, and the fake services on it."""

    def __init__(self, address: str):
        self.address = address
        self.services: subprocess.Popen | None = None

    @property
    def env(self) -> dict:
        return {"DBUS_SYSTEM_BUS_ADDRESS": self.address}

    def start_services(self, network_manager: bool = True):
        env = {"PATH": SYSTEM_PATH, "LANG": "C.UTF-8", **self.env}
        self.services = subprocess.Popen(["/usr/bin/python3", str(FAKE)] + ([] if network_manager else ["no-nm"]),
                                         env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        read_until(self.services.stdout, "ready", 20)

    def emit(self, what: str, value: int):
        out = subprocess.run(["gdbus", "call", "--address", self.address, "--dest", "org.freedesktop.login1",
                              "--object-path", "/org/freedesktop/login1", "--method", "dev.authagent.Test.Emit",
                              what, str(value)],
                             env={"PATH": SYSTEM_PATH}, capture_output=True, text=True, timeout=15)
        assert out.returncode == 0, out.stderr


# Any connection on the system bus (any user's: the stock policy lets everyone send signals) sends logind's
# PrepareForSleep(false) straight to the connection of process PID.
FORGER = r"""
import sys
from gi.repository import Gio, GLib

flags = Gio.DBusConnectionFlags.AUTHENTICATION_CLIENT | Gio.DBusConnectionFlags.MESSAGE_BUS_CONNECTION
bus = Gio.DBusConnection.new_for_address_sync(sys.argv[1], flags, None, None)


def call(member, args):
    return bus.call_sync("org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus", member, args, None,
                         Gio.DBusCallFlags.NONE, 10000, None).unpack()


sent = 0
for name in call("ListNames", None)[0]:
    if name.startswith(":") and call("GetConnectionUnixProcessID", GLib.Variant("(s)", (name,)))[0] == int(sys.argv[2]):
        bus.emit_signal(name, "/org/freedesktop/login1", "org.freedesktop.login1.Manager", "PrepareForSleep",
                        GLib.Variant("(b)", (False,)))
        sent += 1
bus.flush_sync(None)
print("sent", sent, flush=True)
"""


@pytest.fixture
def system_bus():
    daemon = subprocess.Popen(["dbus-daemon", "--session", "--nofork", "--nopidfile", "--print-address=1"],
                              env={"PATH": SYSTEM_PATH}, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    address = daemon.stdout.readline().strip()
    assert address, "dbus-daemon printed no address"
    bus = SystemBus(address)
    try:
        yield bus
    finally:
        if bus.services is not None:
            bus.services.terminate()
            bus.services.wait(timeout=10)
        stop_popen(daemon)


def token_posts(proxy) -> int:
    return sum(1 for hit in proxy.hits if hit == f"POST {TOKEN_PATH}")


def watching(agent):
    wait_for(lambda: "watching the system bus" in agent.log(), 20, "the agent's system-bus watcher")


def token_requests_seen(agent) -> int:
    return sum(1 for line in agent.log().splitlines() if "operation=token" in line and "request failed" not in line)


def test_after_resume_a_token_in_use_is_refreshed_and_a_caller_waits_for_it(
        make_agent, keyring, auth_server, fault_proxy, system_bus):
    proxy = fault_proxy
    system_bus.start_services()
    agent = proxied_agent(make_agent, proxy, env=system_bus.env)
    watching(agent)
    agent.login("work")
    agent.remember(keyring.secret_tool_lookup("work", auth_server.issuer))
    before_suspend = agent.token("work")  # the account is now in use
    posts = token_posts(proxy)
    # A resume forged by another connection, sent to the agent's: not logind's, so not believed (before: each one
    # refreshed every account in use). The real resume below is the only one the log may show.
    forged = subprocess.run(["/usr/bin/python3", "-c", FORGER, system_bus.address, str(agent.proc.pid)],
                            env={"PATH": SYSTEM_PATH, "LANG": "C.UTF-8"}, capture_output=True, text=True, timeout=30)
    assert forged.returncode == 0 and forged.stdout.strip() == "sent 1", (forged.stdout, forged.stderr)

    # The resume's refresh is held at the proxy, so we can look at the agent while it runs.
    proxy.set("hold")
    system_bus.emit("sleep", 1)
    system_bus.emit("sleep", 0)
    assert proxy.reached.wait(20), "no refresh after the resume: " + agent.log()[-3000:]
    assert token_posts(proxy) == posts + 1, "the resume alone (no caller) started the refresh"

    # A caller arriving now must wait for that refresh, not get the token from before the suspend.
    seen = token_requests_seen(agent)
    caller = agent.authctl_popen("token", "work")
    wait_for(lambda: token_requests_seen(agent) > seen, 20, "the caller's request at the agent")
    proxy.release.set()
    out, err = caller.communicate(timeout=60)
    assert caller.returncode == 0, err
    after_resume = out.strip()
    agent.remember(after_resume, keyring.secret_tool_lookup("work", auth_server.issuer))
    assert after_resume != before_suspend, "the caller got the stale token instead of waiting for the refresh"
    assert token_posts(proxy) == posts + 1, "the caller joined the resume's refresh (single flight)"
    assert auth_server.introspect(after_resume)["active"] is True
    assert agent.token("work") == after_resume
    assert agent.log().count("the system resumed from suspend") == 1, "a forged resume was believed"
    print(f"resume: 1 refresh after PrepareForSleep(false); the waiting caller got the new token; "
          f"token requests seen by the proxy: {token_posts(proxy) - posts}")


def test_network_up_retries_a_refresh_in_backoff_at_once(make_agent, keyring, auth_server, fault_proxy, system_bus):
    proxy = fault_proxy
    system_bus.start_services()
    agent = proxied_agent(make_agent, proxy, env=system_bus.env)
    watching(agent)
    assert "network_manager=true" in agent.log()
    agent.login("work")
    agent.remember(keyring.secret_tool_lookup("work", auth_server.issuer))
    old = agent.token("work")

    # The network goes away: every refresh attempt is cut off without an answer.
    proxy.set("drop")
    for _ in range(5):
        r = agent.authctl("token", "work", "--refresh")
        assert r.returncode == 6 and "cannot reach" in r.stderr, r.stderr
    status = agent.account_status("work")
    assert status["last_error"]["code"] == "server_unreachable"
    # Five failures: the backoff is now 2 s * 2^4 with ±25 % jitter, at least 24 s, and the token is not inside its
    # refresh margin, so nothing but the network-up signal would make the agent ask the server now.
    assert keyring.secret_tool_lookup("work", auth_server.issuer), "no outage loses the refresh token"

    proxy.set("pass")
    posts = token_posts(proxy)
    marks = len(proxy.times)
    system_bus.emit("network", 60)  # NM_STATE_CONNECTED_SITE: no internet yet, no retry
    system_bus.emit("network", 70)  # NM_STATE_CONNECTED_GLOBAL
    wait_for(lambda: token_posts(proxy) > posts, 15, "the retry after NetworkManager's StateChanged(70)")
    after_signal = [what for _, what in proxy.times[marks:]]
    assert after_signal[0] == f"POST {TOKEN_PATH}", f"the first request after the signal is the retry: {after_signal}"
    # The proxy sees the POST before the agent has read the reply, stored the rotated token and logged it.
    wait_for(lambda: "refreshed access token" in agent.log().partition("the network is up: retrying at once")[2], 15,
             "the retry's refresh logged after the signal")
    log = agent.log()
    assert log.count("the network is up: retrying at once") == 1, "state 60 retried nothing, 70 once"
    wait_for(lambda: "last_error" not in agent.account_status("work"), 10, "the error cleared by the retry")

    new = agent.token("work")
    agent.remember(new, keyring.secret_tool_lookup("work", auth_server.issuer))
    assert new != old, "the retry refreshed the token"
    assert token_posts(proxy) == posts + 1, "the caller got the retried token from the cache"
    print(f"network-up: token requests after StateChanged(70): {token_posts(proxy) - posts}, "
          f"first request after the signal: {after_signal[0]}")


def test_without_network_manager_the_agent_says_so_once_and_resume_still_works(
        make_agent, keyring, auth_server, system_bus):
    system_bus.start_services(network_manager=False)
    agent = make_agent(env=system_bus.env)
    watching(agent)
    log = agent.log()
    assert "network_manager=false" in log and "logind=true" in log
    assert log.count("NetworkManager is not running") == 1
    agent.login("work")
    agent.remember(keyring.secret_tool_lookup("work", auth_server.issuer))
    old = agent.token("work")
    posts = auth_server.token_posts()
    system_bus.emit("sleep", 1)
    system_bus.emit("sleep", 0)
    wait_for(lambda: auth_server.token_posts() > posts, 20, "the refresh after the resume")
    new = agent.token("work")
    agent.remember(new, keyring.secret_tool_lookup("work", auth_server.issuer))
    assert new != old


def test_without_a_system_bus_one_notice_and_the_socket_serves(make_agent, keyring, auth_server, tmp_path):
    agent = make_agent(env={"DBUS_SYSTEM_BUS_ADDRESS": f"unix:path={tmp_path}/no-such-bus"})
    wait_for(lambda: "no system bus" in agent.log(), 20, "the notice about the missing system bus")
    lines = [line for line in agent.log().splitlines() if "no refresh on resume or network-up" in line]
    assert len(lines) == 1, agent.log()
    agent.login("work")
    agent.remember(keyring.secret_tool_lookup("work", auth_server.issuer))
    assert agent.token("work")
    assert agent.alive()
