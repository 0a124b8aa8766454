"""The agent's life under a service manager, with real tools and no systemd as PID 1: the sd_notify sequence a
NOTIFY_SOCKET receives, the idle exit after socket activation (real systemd-socket-activate brings it back on the
next connection), and SIGTERM in the middle of a rotating refresh losing nothing."""
import json
import shutil
import signal
import socket
import threading
import time

from conftest import pid_alive, read_replies, short_tmpdir, wait_for
from test_hostile import fault_proxy, proxied_agent  # noqa: F401  (fixture and helper shared with the crash tests)


class NotifyListener:
    """A NOTIFY_SOCKET like systemd's: a datagram socket read continuously; `messages` in arrival order."""

    def __init__(self):
        self.dir = short_tmpdir("aa-ntf-")
        self.path = str(self.dir / "notify.sock")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)
        self.sock.settimeout(0.1)
        self.messages: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self):
        while not self._stop.is_set():
            try:
                self.messages.append(self.sock.recv(4096).decode())
            except socket.timeout:
                continue

    def wait(self, needle: str, timeout: float = 20) -> int:
        """Index of the first message containing `needle`."""
        return wait_for(lambda: next((i + 1 for i, m in enumerate(list(self.messages)) if needle in m), 0), timeout,
                        f"{needle!r} on NOTIFY_SOCKET (got {self.messages})") - 1

    def close(self):
        self._stop.set()
        self._thread.join(timeout=5)
        self.sock.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def test_notify_sequence_ready_status_watchdog_stopping(make_agent, keyring, auth_server):
    notify = NotifyListener()
    try:
        agent = make_agent(env={"NOTIFY_SOCKET": notify.path, "WATCHDOG_USEC": "1000000"})
        ready = notify.wait("READY=1")
        idle = notify.wait("STATUS=Serving 1 account, 0 signed in")
        first_ping = notify.wait("WATCHDOG=1")
        agent.login("work")
        waiting = notify.wait("STATUS=Waiting for sign-in: work")
        signed_in = notify.wait("STATUS=Serving 1 account, 1 signed in")
        agent.remember(keyring.secret_tool_lookup("work", auth_server.issuer))
        assert agent.authctl("token", "work", "--refresh").returncode == 0
        refreshing = notify.wait("STATUS=Refreshing work")
        agent.stop()
        stopping = notify.wait("STOPPING=1")
        messages = list(notify.messages)
        print("notifications:", [m for m in messages if "WATCHDOG" not in m])
        assert ready < idle < waiting < signed_in < refreshing < stopping, messages
        assert ready < first_ping < stopping
        # Back to serving after the refresh, and nothing claims readiness again after STOPPING=1.
        assert any(m == "STATUS=Serving 1 account, 1 signed in" for m in messages[refreshing:stopping]), messages
        assert not any("READY=1" in m or m.startswith("STATUS=Serving") for m in messages[stopping + 1:]), messages
    finally:
        notify.close()


def test_sigterm_during_rotating_refresh_loses_nothing(make_agent, keyring, auth_server, fault_proxy):
    """The server has rotated the refresh token and its answer is still on the way when SIGTERM arrives: the agent
    says STOPPING=1, waits for the answer, writes the new refresh token to the keyring, answers its client, exits 0;
    the account works after a restart."""
    proxy = fault_proxy
    notify = NotifyListener()
    try:
        agent = proxied_agent(make_agent, proxy, env={"NOTIFY_SOCKET": notify.path})
        agent.login("work")
        old_rt = keyring.secret_tool_lookup("work", auth_server.issuer)
        agent.remember(old_rt)
        proxy.set("hold_response")
        client = agent.authctl_popen("token", "work", "--refresh")
        assert proxy.reached.wait(20), "the refresh never reached the proxy"
        agent.proc.send_signal(signal.SIGTERM)
        notify.wait("STOPPING=1", 10)
        assert agent.alive(), "the agent exited with a refresh in flight"
        proxy.release.set()
        assert agent.stop() == 0
        out, err = client.communicate(timeout=15)
        assert client.returncode == 0, f"the client in flight lost its answer ({client.returncode}): {err}"
        agent.remember(out.strip())
        new_rt = keyring.secret_tool_lookup("work", auth_server.issuer)
        agent.remember(new_rt)
        assert new_rt and new_rt != old_rt, "the rotated refresh token did not reach the keyring before exit"
        assert keyring.secret_tool_count("work") == 1

        proxy.set("pass")
        agent.start()
        token = agent.token("work", "--refresh")
        assert auth_server.introspect(token)["active"] is True
    finally:
        notify.close()


def test_idle_exit_after_socket_activation(make_agent, keyring):
    """`idle_exit` with a socket from systemd-socket-activate: no exit while a client is connected, exit 0 once idle,
    and the next connection starts the agent again (a loop stands in for systemd, which keeps the socket)."""
    agent = make_agent(start=False, agent={"idle_exit": 2})
    with agent.socket_activated(("XDG_RUNTIME_DIR", "XDG_CONFIG_HOME", "DBUS_SESSION_BUS_ADDRESS")):
        # The first connection starts the agent; while it stays connected the agent stays.
        held = agent.connect()
        held.sendall(b'{"v":1,"id":1,"op":"status"}\n')
        first_pid = read_replies(held, 1, 20)[0]["result"]["agent"]["pid"]
        time.sleep(5)  # 2.5 idle periods with a client connected
        assert pid_alive(first_pid), "the agent exited while a client was connected"
        held.close()
        wait_for(lambda: not pid_alive(first_pid), 20, "the idle agent to exit")
        assert "idle; exiting until the next connection" in agent.log()
        # The loop writes this once it has reaped the agent, which may be after the pid stopped counting as alive
        # (a zombie): waited for, and a non-zero exit (no line at all) still fails here.
        wait_for(lambda: "agent exited 0, listening again" in agent.log(), 10,
                 "the loop to report the idle agent's exit 0")

        def answered():
            r = agent.authctl("status", "--json", timeout=20, check_log=False)
            return json.loads(r.stdout) if r.returncode == 0 else None

        status = wait_for(answered, 20, "the next connection to start the agent again")
        assert status["agent"]["pid"] != first_pid
        assert status["accounts"][0]["name"] == "work"


def test_a_sigterm_the_moment_the_socket_appears_is_a_clean_stop(make_agent, keyring):
    """The agent listens before its service group traps SIGTERM; a stop request in between is held and becomes the
    group's graceful shutdown (exit 0, socket removed), not the default action's death by signal."""
    for _ in range(5):
        agent = make_agent(start=False)
        agent.start(wait=False)
        deadline = time.monotonic() + 20
        while not agent.socket_path.exists():  # spinning on purpose: the point is the first instant it exists
            assert agent.proc.poll() is None, agent.log()[-2000:]
            assert time.monotonic() < deadline, "the agent's socket never appeared"
        agent.proc.send_signal(signal.SIGTERM)
        assert agent.stop() == 0
        assert not agent.socket_path.exists(), "the socket file outlived the agent"
