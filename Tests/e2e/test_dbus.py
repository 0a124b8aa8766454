"""The D-Bus API on a real private session bus: dbus-daemon ACTIVATES the built agent from the shipped activation
file (Exec= pointed at the build), and gdbus/busctl call it, against the real keyring and authorization server.
The same agent also serves the socket: both front ends share one core (a token fetched over D-Bus is the one
authctl gets), and the API the agent serves is exactly dbus/dev.authagent.Agent.xml."""
import json
import os
import re
import subprocess
import time
import xml.etree.ElementTree as ET

import pytest

import dbus_signals
from conftest import REPO, SYSTEM_PATH, _private_bus, bin_dir, kill_pid, pid_alive, wait_for

pytestmark = pytest.mark.release  # also run against the installed package (scripts/test)

NAME, PATH, IFACE = "dev.authagent.Agent", "/dev/authagent/Agent1", "dev.authagent.Agent1"
AS_NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


@pytest.fixture
def activation_bus():
    """A private session bus with gnome-keyring and a servicedir (filled by `activatable_agent`)."""
    yield from _private_bus("aa-dbus-", with_keyring=True, service_dir=True, allow_all_users=True)


class BusClient:
    def __init__(self, bus):
        self.bus = bus
        self.env = {"PATH": SYSTEM_PATH, "DBUS_SESSION_BUS_ADDRESS": bus.address, "LANG": "C.UTF-8",
                    "HOME": str(bus.home)}

    def busctl(self, method: str, signature: str = "", *args, timeout: int = 60) -> dict:
        """`busctl --user call ... --json=short`; returns the decoded reply (asserting success)."""
        argv = ["busctl", "--user", "--json=short", f"--timeout={timeout}", "call", NAME, PATH, IFACE, method]
        if signature:
            argv += [signature, *map(str, args)]
        r = subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=timeout + 10)
        assert r.returncode == 0, f"busctl {method} failed ({r.returncode}): {r.stderr.strip()}"
        return json.loads(r.stdout)

    def gdbus(self, method: str, *args, timeout: int = 60) -> subprocess.CompletedProcess:
        return subprocess.run(["gdbus", "call", "--session", "--dest", NAME, "--object-path", PATH,
                               "--method", f"{IFACE}.{method}", "--timeout", str(timeout), "--", *args],
                              env=self.env, capture_output=True, text=True, timeout=timeout + 10)

    def error_name(self, method: str, *args) -> str:
        r = self.gdbus(method, *args)
        assert r.returncode != 0, f"{method} succeeded: {r.stdout}"
        found = re.search(r"GDBus\.Error:([\w.]+):", r.stderr)
        assert found, r.stderr
        return found.group(1)

    def owner_pid(self) -> int | None:
        r = subprocess.run(["gdbus", "call", "--session", "--dest", "org.freedesktop.DBus", "--object-path",
                            "/org/freedesktop/DBus", "--method", "org.freedesktop.DBus.GetConnectionUnixProcessID",
                            NAME], env=self.env, capture_output=True, text=True, timeout=15)
        return int(r.stdout.strip("()\n, ").split()[-1]) if r.returncode == 0 else None


def unpack(value):
    """busctl's JSON for variants ({"type": ..., "data": ...}) → plain Python values."""
    if isinstance(value, dict) and set(value) == {"type", "data"}:
        return unpack(value["data"])
    if isinstance(value, dict):
        return {k: unpack(v) for k, v in value.items()}
    if isinstance(value, list):
        return [unpack(v) for v in value]
    return value


@pytest.fixture
def activatable_agent(make_agent, activation_bus, auth_server):
    """An agent that is not running but will be activated by the bus: the shipped activation file with Exec=
    pointed at the built binary (through a wrapper that only adds --log-level and sends stderr to the test's log),
    and the session's environment given to the bus the way desktop sessions do (UpdateActivationEnvironment)."""
    agent = make_agent(bus=activation_bus, start=False)
    wrapper = agent.base / "auth-agent-activated"
    wrapper.write_text(f"#!/bin/sh\nexec {bin_dir() / 'auth-agent'} --log-level debug 2>>{agent.stderr_path}\n")
    wrapper.chmod(0o755)
    shipped = (REPO / "dbus" / f"{NAME}.service").read_text()
    assert re.search(r"^Exec=", shipped, re.M) and "SystemdService=auth-agent.service" in shipped
    (activation_bus.service_dir / f"{NAME}.service").write_text(
        re.sub(r"^Exec=.*$", f"Exec={wrapper}", shipped, flags=re.M))
    pairs = ", ".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in agent.env.items()).replace('"', "'")
    r = subprocess.run(["gdbus", "call", "--session", "--dest", "org.freedesktop.DBus", "--object-path",
                        "/org/freedesktop/DBus", "--method", "org.freedesktop.DBus.UpdateActivationEnvironment",
                        "{" + pairs + "}"], env=BusClient(activation_bus).env, capture_output=True, text=True,
                       timeout=15)
    assert r.returncode == 0, r.stderr
    client = BusClient(activation_bus)
    yield agent, client
    pid = client.owner_pid()
    if pid:
        kill_pid(pid)


def interface_shape(xml_text: str) -> list:
    """The interface's methods and signals with their arguments (name, type, direction), annotations ignored."""
    root = ET.fromstring(xml_text)
    iface = next(i for i in root.iter("interface") if i.get("name") == IFACE)
    shape = []
    for member in iface:
        if member.tag not in ("method", "signal", "property"):
            continue
        args = [(a.get("name"), a.get("type"),
                 (a.get("direction") or "in") if member.tag == "method" else None)
                for a in member.findall("arg")]
        shape.append((member.tag, member.get("name"), args))
    return sorted(shape)


def test_activation_calls_errors_and_signals(activatable_agent, activation_bus, auth_server):
    agent, bus = activatable_agent
    assert bus.owner_pid() is None, "nothing owns the name before the first call"

    # The first call activates the agent; it serves the socket as well.
    started = time.monotonic()
    status = unpack(bus.busctl("GetStatus")["data"])
    print(f"first GetStatus, including activation: {time.monotonic() - started:.2f} s")
    agent_info, accounts = status
    pid = bus.owner_pid()
    assert pid and agent_info["pid"] == pid
    assert agent_info["socket"] == str(agent.socket_path)
    assert agent_info["keyring"] == "available"
    assert [a["name"] for a in accounts] == ["work"] and accounts[0]["signed_in"] is False
    assert agent.authctl("status").returncode == 0, "the activated agent also serves the socket"
    assert "serving D-Bus" in agent.log()

    # What the agent serves is exactly the shipped introspection file.
    served = subprocess.run(["gdbus", "introspect", "--session", "--dest", NAME, "--object-path", PATH, "--xml"],
                            env=bus.env, capture_output=True, text=True, timeout=15)
    assert served.returncode == 0, served.stderr
    shipped = (REPO / "dbus" / f"{NAME}.xml").read_text()
    assert interface_shape(served.stdout) == interface_shape(shipped)
    assert "org.freedesktop.DBus.Introspectable" in served.stdout

    listed = unpack(bus.busctl("ListAccounts")["data"])[0]
    assert listed == [{"name": "work", "issuer": auth_server.issuer, "client_id": "auth-agent-test",
                       "redirect_uri": "http://127.0.0.1/oauth2/callback/work",
                       "scopes": ["openid", "email", "offline_access"]}]

    # A desktop program that listens: it subscribes and gets every account's signals (docs/DBUS.md, "Signals").
    listener_proc = subprocess.Popen(dbus_signals.ARGV, env=bus.env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
    with dbus_signals.listening(listener_proc) as listener:
        # Errors are the socket's codes as named D-Bus errors.
        assert bus.error_name("GetAccessToken", "nope", "0") == "dev.authagent.Error.UnknownAccount"
        assert bus.error_name("GetAccessToken", "work", "60") == "dev.authagent.Error.LoginRequired"
        assert bus.error_name("GetAccessToken", "work", "4000000000") == "dev.authagent.Error.BadRequest"
        assert bus.error_name("Logout", "''") == "dev.authagent.Error.UnknownAccount"
        listener.wait_for("SignInRequired work")
        # Any peer can send the agent's connection a NameOwnerChanged saying the listener left: only the bus
        # daemon's is believed. Before, the forged one dropped the listener's subscription (no AccountChanged below).
        dbus_signals.forge_name_owner_changed(bus.env, victim=listener.unique_name)

        # Sign in through the socket; the D-Bus side sees the change and serves the same cached token.
        agent.login("work")
        listener.wait_for("AccountChanged work")
        reply = bus.busctl("GetAccessToken", "su", "work", 60)
        assert reply["type"] == "sx"
        token, expires_at = reply["data"]
        agent.remember(token)
        assert expires_at > time.time() + 60
        assert auth_server.introspect(token)["active"] is True
        assert agent.token("work") == token, "one core: D-Bus and the socket share the cache"
        rt = activation_bus.secret_tool_lookup("work", auth_server.issuer)
        agent.remember(rt)

        # Log out over D-Bus: revoked at the server, gone from the keyring, signal sent.
        result = unpack(bus.busctl("Logout", "s", "work")["data"])[0]
        assert result == {"account": "work", "had_refresh_token": True, "revoked": True}
        listener.wait_for("AccountChanged work", count=2)
        assert activation_bus.secret_tool_lookup("work", auth_server.issuer) is None
        assert auth_server.refresh_token_works(rt) is False
        assert bus.error_name("GetAccessToken", "work", "0") == "dev.authagent.Error.LoginRequired"

    # SIGTERM: a clean exit that gives the name back.
    os.kill(pid, 15)
    wait_for(lambda: not pid_alive(pid), 15, "the activated agent to exit on SIGTERM")
    wait_for(lambda: bus.owner_pid() is None, 5, "the name to be released")
    assert "stopped" in agent.log()


def test_an_invalid_config_is_a_quick_named_error_over_dbus(activatable_agent, activation_bus):
    """D-Bus callers are not left waiting either: an agent activated on an invalid file answers every method at
    once with dev.authagent.Error.ConfigError (the socket's config_error), and serves after the file is fixed."""
    agent, bus = activatable_agent
    good = agent.config_path.read_text()
    agent.write_config(good + "frobnicate = 1\n")
    for method, args in (("GetAccessToken", ("work", "60")), ("GetStatus", ())):
        started = time.monotonic()
        assert bus.error_name(method, *args) == "dev.authagent.Error.ConfigError", method
        print(f"{method} on an invalid config: {time.monotonic() - started:.2f} s (activation included)")
    r = bus.gdbus("GetStatus")
    assert "config.toml:" in r.stderr and "frobnicate" in r.stderr, r.stderr
    agent.write_config(good)
    agent_info, accounts = unpack(bus.busctl("GetStatus")["data"])
    assert [a["name"] for a in accounts] == ["work"], "fixed: the next call reads the file"


def test_login_over_dbus_replies_when_the_sign_in_completes(activatable_agent, activation_bus, auth_server):
    """Login is a long call: the bus stays responsive while it waits (other calls are answered meanwhile)."""
    agent, bus = activatable_agent
    bus.busctl("GetStatus")
    login = subprocess.Popen(["busctl", "--user", "--json=short", "--timeout=60", "call", NAME, PATH, IFACE, "Login",
                              "s", "work"], env=bus.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = login.communicate(timeout=70)
    assert login.returncode == 0, err
    result = unpack(json.loads(out)["data"])[0]
    assert result["account"] == "work" and result["has_refresh_token"] is True
    assert result["email"], result
    assert agent.browser_runs() == 1
    token = bus.busctl("GetAccessToken", "su", "work", 0)["data"][0]
    agent.remember(token, activation_bus.secret_tool_lookup("work", auth_server.issuer))
    assert auth_server.introspect(token)["active"] is True


def test_login_does_not_block_the_bus(activatable_agent, activation_bus):
    """While a sign-in waits for a person (the browser never finishes), other calls are still answered."""
    agent, bus = activatable_agent
    # A browser that starts and never signs in.
    subprocess.run(["gdbus", "call", "--session", "--dest", "org.freedesktop.DBus", "--object-path",
                    "/org/freedesktop/DBus", "--method", "org.freedesktop.DBus.UpdateActivationEnvironment",
                    "{'FAKE_BROWSER_MODE': 'none'}"], env=bus.env, capture_output=True, text=True, timeout=15,
                   check=True)
    bus.busctl("GetStatus")
    login = subprocess.Popen(["gdbus", "call", "--session", "--dest", NAME, "--object-path", PATH, "--method",
                              f"{IFACE}.Login", "work", "--timeout", "60"], env=bus.env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: unpack(bus.busctl("GetStatus")["data"])[1][0]["login_pending"], 20, "the sign-in to start")
        # The bus thread is free: a status call is answered while Login waits.
        assert login.poll() is None
        assert unpack(bus.busctl("ListAccounts")["data"])[0][0]["name"] == "work"
        # Logging out cancels the pending sign-in: Login gets its named error.
        bus.busctl("Logout", "s", "work")
        _, err = login.communicate(timeout=20)
        assert "dev.authagent.Error.LoginCancelled" in err, err

        # A caller that leaves the bus (like a socket client hanging up) cancels its sign-in.
        login = subprocess.Popen(["gdbus", "call", "--session", "--dest", NAME, "--object-path", PATH, "--method",
                                  f"{IFACE}.Login", "work", "--timeout", "60"], env=bus.env, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
        wait_for(lambda: unpack(bus.busctl("GetStatus")["data"])[1][0]["login_pending"], 20, "the second sign-in")
        login.kill()
        login.wait(timeout=5)
        wait_for(lambda: not unpack(bus.busctl("GetStatus")["data"])[1][0]["login_pending"], 20,
                 "the sign-in to be cancelled after its caller left")
        assert "a D-Bus caller left; cancelling its wait for a person" in agent.log()
    finally:
        if login.poll() is None:
            login.kill()


def test_other_uid_is_access_denied(activatable_agent, activation_bus):
    """The bus lets another user connect (this test's bus allows it); the agent refuses by the caller's uid."""
    if os.geteuid() != 0:
        pytest.skip("running a client as another uid needs root")
    agent, bus = activatable_agent
    bus.busctl("GetStatus")
    for path in (activation_bus.base, activation_bus.base / "bus"):
        path.chmod(0o711)
    socket_path = activation_bus.address.split("path=", 1)[1].split(",", 1)[0]
    os.chmod(socket_path, 0o666)
    r = subprocess.run([*AS_NOBODY, "gdbus", "call", "--session", "--dest", NAME, "--object-path", PATH, "--method",
                        f"{IFACE}.GetStatus"], env={"PATH": SYSTEM_PATH, "DBUS_SESSION_BUS_ADDRESS": bus.env[
                            "DBUS_SESSION_BUS_ADDRESS"], "HOME": "/"}, capture_output=True, text=True, timeout=30)
    assert r.returncode != 0, r.stdout
    assert "org.freedesktop.DBus.Error.AccessDenied" in r.stderr, r.stderr
    refusal = wait_for(lambda: next((line for line in agent.log().splitlines()
                                     if "refused a D-Bus call from another user" in line), None), 5, "the refusal")
    assert "peer_uid=65534" in refusal, refusal
    assert unpack(bus.busctl("GetStatus")["data"])[0]["pid"] == bus.owner_pid(), "still serving its own user"


def test_no_session_bus_still_serves_the_socket(make_agent):
    """No session bus at all: one warning, no crash, no hang; the socket works."""
    agent = make_agent(bus=False)
    assert agent.authctl("status").returncode == 0
    warnings = [line for line in agent.log().splitlines() if "the D-Bus API is off" in line]
    assert len(warnings) == 1, agent.log()
    assert "no session bus" in warnings[0]
    agent.stop()
