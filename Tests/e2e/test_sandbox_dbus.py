"""Sandboxed apps over D-Bus (issue 46), through the real xdg-dbus-proxy run the way Flatpak runs it: one proxy per
app instance, `xdg-dbus-proxy BUS SOCKET --filter --talk=dev.authagent.Agent`, in a bwrap of its own (Flatpak's
`add_bwrap_wrapper`: the host's tree read-only, the bus's and the proxy's directories bound in, the app's
`/.flatpak-info` as a file in its tmpfs root, no pid namespace). The app is `gdbus` in a sandbox made as
test_sandbox.py makes one, whose session bus is the proxy's socket (`/run/flatpak/bus`, as in Flatpak). The bus
daemon tells the agent the proxy's pid, not the app's.

What it shows: the agent names the app (`flatpak:APP`, its instance), not the proxy's path; its `flatpak:` entry
serves it and an account naming another app refuses it; and without `--talk=dev.authagent.Agent` the proxy refuses the
call before it reaches the agent."""
import contextlib
import json
import os
import re
import subprocess

import pytest

import dbus_signals
from conftest import SYSTEM_PATH, default_account, render_config, wait_for
from test_identity import audit, notification_server  # noqa: F401 (fixture)
from test_sandbox import APP, BWRAP, INSTANCE, app_info, host_tree, sandbox_agent, set_allowed_clients  # noqa: F401

pytestmark = pytest.mark.release  # also against the installed package

PROXY = "/usr/bin/xdg-dbus-proxy"
NAME, OBJECT, IFACE = "dev.authagent.Agent", "/dev/authagent/Agent1", "dev.authagent.Agent1"


def bus_socket(address: str) -> str:
    found = re.match(r"unix:path=([^,;]+)", address)
    assert found, f"the private bus is not a socket file: {address}"
    return found.group(1)


@contextlib.contextmanager
def dbus_proxy(agent, talk: bool, info: str | None = None):
    """The app's proxy (see the module) with the app's `/.flatpak-info` (`info`, default test_sandbox's), ready (it
    writes to its `--fd` once it listens), stopped after. Yields its socket's path."""
    assert os.access(PROXY, os.X_OK), "xdg-dbus-proxy is not installed: run scripts/setup"
    address = agent.env["DBUS_SESSION_BUS_ADDRESS"]
    directory = agent.base / "dbus-proxy"
    directory.mkdir(exist_ok=True)
    socket = directory / "app-bus"
    info_read, info_write = os.pipe()
    os.write(info_write, (info or app_info()).encode())
    os.close(info_write)
    ready_read, ready_write = os.pipe()
    bus_dir = os.path.dirname(bus_socket(address))
    argv = [BWRAP, "--unshare-user", "--die-with-parent", *host_tree(), "--bind", bus_dir, bus_dir,
            "--bind", str(directory), str(directory), "--perms", "0600", "--file", str(info_read), "/.flatpak-info",
            "--", PROXY, f"--fd={ready_write}", address, str(socket), "--filter",
            *([f"--talk={NAME}"] if talk else [])]
    proxy = subprocess.Popen(argv, pass_fds=(info_read, ready_write), stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    os.close(info_read)
    os.close(ready_write)
    try:
        ready = os.read(ready_read, 1)  # b"x" once it listens; b"" if it died
        assert ready == b"x", f"xdg-dbus-proxy did not start: {proxy.communicate(timeout=10)[1]}"
        yield socket
    finally:
        os.close(ready_read)  # the proxy stops when its --fd closes
        try:
            proxy.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proxy.kill()
            proxy.wait(timeout=10)


def call_from_sandbox(agent, socket, info: str | None = None) -> subprocess.CompletedProcess:
    """`gdbus call ... GetAccessToken work 0` in the app's sandbox, on the proxy's socket as its session bus."""
    proc = start_call_from_sandbox(socket, info)
    out, err = proc.communicate(timeout=90)
    token = re.match(r"\('([^']+)',", out)
    if proc.returncode == 0 and token:
        agent.remember(token.group(1))
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def start_call_from_sandbox(socket, info: str | None = None) -> subprocess.Popen:
    return start_in_sandbox(socket, ["gdbus", "call", "--session", "--dest", NAME, "--object-path", OBJECT, "--method",
                                     f"{IFACE}.GetAccessToken", "--timeout", "60", "work", "0"], info)


def start_in_sandbox(socket, command: list[str], info: str | None = None) -> subprocess.Popen:
    """`command` in the app's sandbox, on the proxy's socket as its session bus."""
    info_read, info_write = os.pipe()
    os.write(info_write, (info or app_info()).encode())
    os.close(info_write)
    argv = [BWRAP, "--unshare-user", "--disable-userns", "--unshare-pid", "--die-with-parent", *host_tree(),
            "--proc", "/proc", "--dev", "/dev", "--bind", str(socket), "/run/flatpak/bus",
            "--ro-bind-data", str(info_read), "/.flatpak-info", *command]
    env = {"PATH": SYSTEM_PATH, "DBUS_SESSION_BUS_ADDRESS": "unix:path=/run/flatpak/bus", "LANG": "C.UTF-8"}
    try:
        return subprocess.Popen(argv, env=env, pass_fds=(info_read,), stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    finally:
        os.close(info_read)


def test_the_agent_names_the_app_behind_its_dbus_proxy(sandbox_agent, auth_server):
    agent = sandbox_agent
    set_allowed_clients(agent, auth_server, [f"flatpak:{APP}"])
    with dbus_proxy(agent, talk=True) as socket:
        served = call_from_sandbox(agent, socket)
        assert served.returncode == 0, served.stderr
        assert re.match(r"\('[^']+', int64 \d+\)", served.stdout), "not GetAccessToken's reply"  # (never print it)
        entry = audit(agent)[-1]
        assert (entry["outcome"], entry["reason"]) == ("granted", "listed"), entry
        caller = entry["caller"]
        assert (caller["via"], caller["flatpak_app"], caller["flatpak_instance"]) == ("dbus", APP, INSTANCE), caller
        assert caller["exe"] == PROXY, "the premise: the bus names the proxy's process"
        assert f"flatpak:{APP} (instance {INSTANCE}) {PROXY}" in agent.authctl("audit").stdout

        # An account that names another app refuses it; one naming the proxy's path does not serve it either.
        for entries in ([f"flatpak:{APP}.Other"], [PROXY]):
            set_allowed_clients(agent, auth_server, entries)
            refused = call_from_sandbox(agent, socket)
            assert refused.returncode != 0 and refused.stdout == "", "served by an account not naming the app"
            assert "dev.authagent.Error.AccessDenied" in refused.stderr, refused.stderr
            entry = audit(agent)[-1]
            assert (entry["outcome"], entry["reason"], entry["caller"]["flatpak_app"]) == ("denied", "not_listed", APP)


def test_an_app_gets_signals_only_of_the_accounts_it_was_given(make_agent, auth_server):
    """Issue 53: signals were broadcast, and the proxy passes the agent's broadcasts on to an app that may talk to it,
    so the app learned of accounts ListAccounts hides from it. Now each subscriber gets them by name: the app (given
    `work` only) subscribes through its proxy and gets none about `home`, while a desktop program gets them all. The
    signals from one sender to one receiver keep their order, so `work`'s, sent last, arriving means `home`'s never
    will."""
    agent = make_agent(accounts={"work": default_account(auth_server.issuer, allowed_clients=[f"flatpak:{APP}"]),
                                 "home": default_account(auth_server.issuer)}, agent={"consent_timeout": 60})
    env = {"PATH": SYSTEM_PATH, "DBUS_SESSION_BUS_ADDRESS": agent.env["DBUS_SESSION_BUS_ADDRESS"], "LANG": "C.UTF-8"}
    desktop_proc = subprocess.Popen(dbus_signals.ARGV, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)
    with dbus_signals.listening(desktop_proc) as desktop, dbus_proxy(agent, talk=True) as socket:
        with dbus_signals.listening(start_in_sandbox(socket, dbus_signals.ARGV)) as app:
            shown = subprocess.run(["gdbus", "call", "--session", "--dest", NAME, "--object-path", OBJECT, "--method",
                                    f"{IFACE}.ListAccounts"], env=env, capture_output=True, text=True, timeout=30)
            assert "'home'" in shown.stdout, "the premise: the desktop sees both accounts"
            listed = start_in_sandbox(socket, ["gdbus", "call", "--session", "--dest", NAME, "--object-path", OBJECT,
                                               "--method", f"{IFACE}.ListAccounts"])
            out, err = listed.communicate(timeout=60)
            assert listed.returncode == 0 and "'work'" in out and "'home'" not in out, (out, err)

            assert agent.authctl("logout", "home").returncode == 0           # AccountChanged home
            assert agent.authctl("token", "home").returncode == 4            # SignInRequired home
            assert agent.authctl("logout", "work").returncode == 0           # AccountChanged work
            assert desktop.wait_for("AccountChanged work") == [
                "subscribed", "AccountChanged home", "SignInRequired home", "AccountChanged work"]
            assert app.wait_for("AccountChanged work") == ["subscribed", "AccountChanged work"], \
                "the app heard of an account it was not given"


def test_without_the_talk_permission_the_proxy_refuses_the_call(sandbox_agent, auth_server):
    agent = sandbox_agent
    set_allowed_clients(agent, auth_server, [f"flatpak:{APP}"])
    with dbus_proxy(agent, talk=False) as socket:
        refused = call_from_sandbox(agent, socket)
    assert refused.returncode != 0 and refused.stdout == "", "the call went through a proxy without --talk"
    assert "org.freedesktop.DBus.Error.ServiceUnknown" in refused.stderr, refused.stderr
    assert audit(agent) == [], "the call reached the agent"


def test_a_not_contained_app_is_asked_about_as_one_in_the_notification(sandbox_agent, notification_server):
    """An account without a policy asks about a sandboxed app; when its sandbox has the session bus and may talk to the
    Secret Service, the desktop notification says it is not contained and why. Denied from the notification: the
    app's call fails with AccessDenied, and the audit names the holes."""
    agent = sandbox_agent
    info = app_info(context="sockets=wayland;session-bus;", session_bus=f"{NAME}=talk\norg.freedesktop.secrets=talk")
    with dbus_proxy(agent, talk=True, info=info) as socket:
        waiting = start_call_from_sandbox(socket, info)
        try:
            def asked():
                lines = [json.loads(line) for line in notification_server.log.read_text().splitlines()]
                return [n for n in lines if n.get("summary", "").startswith("Allow ")]

            wait_for(lambda: len(asked()) == 1, 30, "the consent notification")
            [shown] = asked()
            assert shown["summary"] == f"Allow flatpak:{APP} to use work?", shown
            assert shown["body"].startswith(
                f"flatpak:{APP} (instance {INSTANCE}) (not contained: socket=session-bus, "
                "talk-name=org.freedesktop.secrets) /usr/bin/xdg-dbus-proxy pid "), shown["body"]
            assert "Its sandbox has holes that let it do what any program of yours can" in shown["body"], shown["body"]
            assert "An app chooses its own id" in shown["body"], shown["body"]
            answer = subprocess.run(["gdbus", "call", "--session", "--dest", "org.freedesktop.Notifications",
                                     "--object-path", "/org/freedesktop/Notifications", "--method",
                                     "dev.authagent.Test.Invoke", str(shown["id"]), "consent-deny"],
                                    env=notification_server.env, capture_output=True, text=True, timeout=15)
            assert answer.returncode == 0, answer.stderr
            out, err = waiting.communicate(timeout=60)
        finally:
            if waiting.poll() is None:
                waiting.kill()
                waiting.wait(timeout=10)
    assert waiting.returncode != 0 and out == "", "served after it was denied"
    assert "dev.authagent.Error.AccessDenied" in err, err
    entry = audit(agent)[-1]
    assert (entry["outcome"], entry["reason"]) == ("denied", "denied_by_user"), entry
    assert entry["caller"]["not_contained"] == ["socket=session-bus", "talk-name=org.freedesktop.secrets"], entry
