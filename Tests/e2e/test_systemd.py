"""systemd integration without systemd as PID 1: socket activation through systemd-socket-activate, sd_notify to a
NOTIFY_SOCKET the test opens, and `systemd-analyze --user verify` of the shipped units."""
import os
import re
import shutil
import socket
import subprocess
import threading
import time

import pytest

from conftest import REPO, SYSTEM_PATH, bin_dir, short_tmpdir, wait_for

pytestmark = pytest.mark.release  # also run against the installed package (scripts/test)

UNITS = REPO / "systemd"


def read_notifications(sock: socket.socket, until: str, timeout: float) -> list[str]:
    messages = []
    deadline = time.monotonic() + timeout
    while not any(until in m for m in messages):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise AssertionError(f"no {until!r} on NOTIFY_SOCKET within {timeout} s; got {messages}")
        sock.settimeout(remaining)
        try:
            messages.append(sock.recv(4096).decode())
        except socket.timeout:
            continue
    return messages


def test_socket_activation_and_readiness(make_agent, keyring, auth_server):
    agent = make_agent(start=False)
    notify_dir = short_tmpdir("aa-ntf-")
    notify_path = notify_dir / "notify.sock"
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(str(notify_path))
    try:
        sock = agent.socket_path
        sock.parent.mkdir(mode=0o700)
        env = dict(agent.env, NOTIFY_SOCKET=str(notify_path))
        forwarded = ["XDG_RUNTIME_DIR", "XDG_CONFIG_HOME", "DBUS_SESSION_BUS_ADDRESS", "NOTIFY_SOCKET", "BROWSER",
                     "FAKE_BROWSER_PYTHON", "FAKE_BROWSER_LOG", "FAKE_BROWSER_MODE", "LANG"]
        args = ["systemd-socket-activate", "-l", str(sock)]
        for name in forwarded:
            args += ["-E", name]
        args += [str(bin_dir() / "auth-agent"), "--log-level", "debug"]
        agent._stderr = open(agent.stderr_path, "ab")
        agent.proc = subprocess.Popen(args, env=env, stdin=subprocess.DEVNULL, stdout=agent._stderr,
                                      stderr=agent._stderr, start_new_session=True)
        wait_for(lambda: sock.exists() or agent.proc.poll() is not None, 10, "systemd-socket-activate to listen")
        assert agent.proc.poll() is None, agent.log()
        # Nothing has started yet: the agent is launched by the first connection.
        assert "ready" not in agent.log()

        status = agent.authctl("status", "--json", env={"AUTH_AGENT_SOCKET": str(sock)}, timeout=30)
        assert status.returncode == 0, (status.returncode, status.stderr, agent.log()[-2000:])
        messages = read_notifications(notify, "READY=1", 10)
        assert any("STATUS=" in m for m in messages), messages
        assert "using the socket passed by systemd" in agent.log()
        import json
        data = json.loads(status.stdout)
        assert data["agent"]["socket"] == str(sock)
        assert data["agent"]["pid"] == agent.proc.pid, "systemd-socket-activate execs the agent in place"
        assert data["accounts"][0]["name"] == "work"

        # The activated agent is a fully working agent (keyring and browser environment forwarded).
        agent.login("work")
        token = agent.token("work")
        assert auth_server.introspect(token)["active"] is True
        agent.remember(keyring.secret_tool_lookup("work", auth_server.issuer))

        agent.stop()
        read_notifications(notify, "STOPPING=1", 5)
    finally:
        notify.close()
        shutil.rmtree(notify_dir, ignore_errors=True)


def test_no_notify_socket_is_fine(agent):
    # Started by hand (no NOTIFY_SOCKET, no LISTEN_FDS): binds its own socket and says so.
    assert "using the socket passed by systemd" not in agent.log()
    assert "ready" in agent.log()


@pytest.fixture
def unit_files():
    service, sock = UNITS / "auth-agent.service", UNITS / "auth-agent.socket"
    if not service.exists() or not sock.exists():
        pytest.skip("systemd/auth-agent.service or systemd/auth-agent.socket does not exist yet")
    return service, sock


def test_units_verify(unit_files, tmp_path):
    service, sock = unit_files
    work = short_tmpdir("aa-units-")
    try:
        runtime = work / "run"
        runtime.mkdir(mode=0o700)
        text = service.read_text()
        assert re.search(r"^ExecStart=", text, re.M)
        # ExecStart names the installed binary (%h/.local/bin/auth-agent); point it at the built one.
        text = re.sub(r"^ExecStart=\S*auth-agent", f"ExecStart={bin_dir() / 'auth-agent'}", text, flags=re.M)
        assert re.search(r"^ExecReload=\S*/authctl reload$", text, re.M), "systemctl reload waits for authctl reload"
        text = re.sub(r"^ExecReload=\S*authctl", f"ExecReload={bin_dir() / 'authctl'}", text, flags=re.M)
        (work / "auth-agent.service").write_text(text)
        (work / "auth-agent.socket").write_text(sock.read_text())
        env = {"PATH": SYSTEM_PATH, "HOME": str(work), "XDG_RUNTIME_DIR": str(runtime), "LANG": "C.UTF-8"}
        result = subprocess.run(["systemd-analyze", "--user", "verify", str(work / "auth-agent.service"),
                                 str(work / "auth-agent.socket")],
                                env=env, capture_output=True, text=True, timeout=60, cwd=work)
        output = result.stdout + result.stderr
        assert result.returncode == 0, output
        assert "Unknown key" not in output, output
        assert "Unknown section" not in output, output
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _settings(path) -> dict:
    settings = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith(("#", ";", "[")) and "=" in line:
            key, value = line.split("=", 1)
            settings.setdefault(key.strip(), []).append(value.strip())
    return settings


def test_units_are_hardened_as_documented(unit_files):
    """SECURITY.md 21 and 23: explicit socket modes, hardened service, socket where the agent looks for it."""
    service, sock = (_settings(p) for p in unit_files)
    assert sock["SocketMode"] == ["0600"]
    assert sock["DirectoryMode"] == ["0700"]
    assert sock["ListenStream"] == ["%t/auth-agent/agent.sock"]
    assert service["Type"] == ["notify"]
    assert service["NoNewPrivileges"] == ["yes"]
    assert service["UMask"] == ["0077"]
    assert service["LimitCORE"] == ["0"]
    assert set(service["RestrictAddressFamilies"][0].split()) == {"AF_UNIX", "AF_INET", "AF_INET6"}
    assert "@system-service" in service["SystemCallFilter"][0]
    for option in ("RestrictNamespaces", "MemoryDenyWriteExecute", "LockPersonality", "RestrictRealtime",
                   "RestrictSUIDSGID"):
        assert service[option] == ["yes"], option
    assert "ProtectHome" not in service, "ProtectHome hides /run/user (PLATFORM.md)"


def test_watchdog_pings_while_healthy(make_agent):
    """WatchdogSec=: with WATCHDOG_USEC set, WATCHDOG=1 arrives at about half the interval, after READY=1."""
    notify_dir = short_tmpdir("aa-wd-")
    notify_path = notify_dir / "notify.sock"
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(str(notify_path))
    try:
        agent = make_agent(env={"NOTIFY_SOCKET": str(notify_path), "WATCHDOG_USEC": "1000000"})
        started = time.monotonic()
        messages = read_notifications(notify, "READY=1", 10)
        pings = 0
        while pings < 3:
            assert time.monotonic() - started < 10, f"only {pings} watchdog pings in 10 s: {messages}"
            messages += read_notifications(notify, "WATCHDOG=1", 5)
            pings = sum("WATCHDOG=1" in m for m in messages)
        ready_index = next(i for i, m in enumerate(messages) if "READY=1" in m)
        first_ping = next(i for i, m in enumerate(messages) if "WATCHDOG=1" in m)
        assert ready_index < first_ping, messages
        assert "watchdog enabled" in agent.log()
        agent.stop()
    finally:
        notify.close()
        shutil.rmtree(notify_dir, ignore_errors=True)


def test_no_watchdog_without_watchdog_usec(agent):
    assert "watchdog enabled" not in agent.log()


JOURNAL_SOCKET = "/run/systemd/journal/socket"


def parse_journal_datagram(data: bytes) -> dict[str, str]:
    """systemd's native journal protocol: KEY=VALUE\\n, or KEY\\n<le64 size><bytes>\\n for binary values."""
    fields, i = {}, 0
    while i < len(data):
        nl = data.index(b"\n", i)
        line = data[i:nl]
        if b"=" in line:
            key, value = line.split(b"=", 1)
            i = nl + 1
        else:
            key, size = line, int.from_bytes(data[nl + 1:nl + 9], "little")
            value = data[nl + 9:nl + 9 + size]
            i = nl + 9 + size + 1
        fields[key.decode()] = value.decode(errors="replace")
    return fields


def test_journal_entries_are_structured_and_secret_free(make_agent, keyring, auth_server):
    """Under systemd (stderr is the journal stream) entries go to the journal with uppercase fields."""
    if os.path.exists(JOURNAL_SOCKET):
        pytest.skip("a journald is running here; this test plays journald itself")
    if os.geteuid() != 0:
        pytest.skip("binding /run/systemd/journal/socket needs root")
    os.makedirs(os.path.dirname(JOURNAL_SOCKET), exist_ok=True)
    journal = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    journal.bind(JOURNAL_SOCKET)
    journal.settimeout(0.2)
    received, stop = [], threading.Event()

    def drain():  # like journald: read continuously (a full datagram queue would block the sender)
        while not stop.is_set():
            try:
                received.append(journal.recv(1 << 20))
            except socket.timeout:
                continue

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        agent = make_agent(start=False)
        agent.stderr_path.touch()
        st = os.stat(agent.stderr_path)
        agent.env["JOURNAL_STREAM"] = f"{st.st_dev}:{st.st_ino}"
        agent.start()
        agent.login("work")
        token = agent.token("work")
        refreshed = agent.authctl("token", "work", "--refresh").stdout.strip()
        agent.remember(token, refreshed, keyring.secret_tool_lookup("work", auth_server.issuer))
        assert agent.authctl("logout", "work").returncode == 0
        agent.stop()

        stop.set()
        reader.join(timeout=5)
        entries = [parse_journal_datagram(d) for d in received]
        raw = b"".join(received)
        assert entries, "nothing reached the journal"
        assert all(e.get("SYSLOG_IDENTIFIER") == "auth-agent" for e in entries)
        messages = [e["MESSAGE"] for e in entries]
        assert "ready" in messages and "signed in" in messages and "signed out" in messages, messages
        signed_in = next(e for e in entries if e["MESSAGE"] == "signed in")
        assert signed_in["ACCOUNT"] == "work" and signed_in["PRIORITY"] == "6"
        requests = [e for e in entries if e["MESSAGE"] == "request"]
        assert any(e.get("OPERATION") == "token" and e.get("PEER_PID", "").isdigit() for e in requests), requests
        # The caller's executable, read by the agent from /proc (authctl here), is in every request entry.
        authctl_exe = os.path.realpath(os.path.join(os.environ["AUTH_AGENT_BIN_DIR"], "authctl"))
        from_authctl = [e for e in requests if e.get("OPERATION") in ("login", "token", "logout")]
        assert from_authctl and all(e.get("PEER_EXE") == authctl_exe for e in from_authctl), \
            [(e.get("OPERATION"), e.get("PEER_EXE")) for e in requests]
        # Nothing went to stderr: the journal is the sink. And no secret went anywhere.
        assert agent.log().strip() == "", agent.log()[:500]
        for secret in agent.secrets | set(auth_server.issued_secrets()):
            assert secret.encode() not in raw, "a token reached the journal"
    finally:
        stop.set()
        reader.join(timeout=5)
        journal.close()
        os.unlink(JOURNAL_SOCKET)
