"""A broken configuration file never leaves clients hanging or the agent dead, and a changed one is put in force
without a restart (`authctl reload`, SIGHUP), keeping sign-ins and cached tokens. Also: every authctl call is
bounded in time (exit 11), whatever the agent does."""
import json
import os
import signal
import socket
import threading
import time

import pytest

from conftest import default_account, render_config, short_tmpdir, wait_for

pytestmark = pytest.mark.release

BROKEN_LINE = "frobnicate = 1"


def broken(config_text: str) -> str:
    return config_text + BROKEN_LINE + "\n"


def broken_line_number(config_text: str) -> int:
    return broken(config_text).splitlines().index(BROKEN_LINE) + 1


def start_without_waiting(agent):
    agent.start(wait=False)
    wait_for(lambda: agent.socket_path.exists() or agent.proc.poll() is not None, 20, "the agent's socket")
    assert agent.proc.poll() is None, f"the agent exited ({agent.proc.returncode}):\n{agent.log()[-2000:]}"


def test_broken_config_answers_config_error_until_the_file_is_fixed(make_agent, auth_server):
    good = render_config({"work": default_account(auth_server.issuer)})
    agent = make_agent(config_text=broken(good), start=False)
    start_without_waiting(agent)
    where = f"config.toml:{broken_line_number(good)}:"

    for verb in (["status"], ["token", "work"], ["accounts"], ["git-credential", "--account", "work", "get"]):
        result = agent.authctl(*verb, input="protocol=https\nhost=example.com\n\n" if verb[0] == "git-credential" else None,
                               timeout=10)
        assert result.returncode == 10, (verb, result.returncode, result.stderr)
        assert where in result.stderr and "frobnicate" in result.stderr, (verb, result.stderr)
    [reply] = agent.raw(b'{"v":1,"id":7,"op":"ping"}\n')
    assert reply["id"] == 7 and reply["error"]["code"] == "config_error", reply
    assert where in reply["error"]["message"]
    assert agent.alive(), "the agent serves the error; it does not exit"
    assert "configuration error" in agent.log() and where in agent.log()

    # The user fixes the file: the next request is served, with no restart.
    pid = agent.proc.pid
    agent.write_config(good)
    status = agent.status_json()
    assert [a["name"] for a in status["accounts"]] == ["work"]
    assert agent.proc.pid == pid and agent.alive()
    agent.login("work")
    assert agent.token("work")


def test_reload_puts_a_new_account_in_force_and_keeps_cached_tokens(signed_in_agent, auth_server):
    agent = signed_in_agent
    first = agent.token("work")
    posts = auth_server.token_posts()
    accounts = {"work": default_account(auth_server.issuer),
                "home": default_account(auth_server.issuer, scopes=["openid"])}
    agent.write_config(render_config(accounts))

    result = agent.authctl("reload", "--json", timeout=20)
    assert result.returncode == 0, result.stderr
    outcome = json.loads(result.stdout)
    assert outcome["accounts"] == ["work", "home"] and outcome["added"] == ["home"], outcome
    assert outcome["removed"] == [] and outcome["changed"] == [] and outcome["needs_restart"] == []

    assert agent.token("work") == first, "the cached token survives a reload"
    assert auth_server.token_posts() == posts, "a reload asks the server for nothing"
    names = [a["name"] for a in agent.status_json()["accounts"]]
    assert names == ["work", "home"]
    assert agent.account_status("work")["signed_in"] is True


def test_invalid_reload_is_refused_and_the_old_configuration_keeps_serving(signed_in_agent, auth_server):
    agent = signed_in_agent
    first = agent.token("work")
    good = render_config({"work": default_account(auth_server.issuer)})
    agent.write_config(broken(good))

    result = agent.authctl("reload", timeout=20)
    assert result.returncode == 10, (result.returncode, result.stderr)
    assert f"config.toml:{broken_line_number(good)}:" in result.stderr
    # The configuration in force goes on serving, however often the broken file is looked at.
    for _ in range(3):
        assert agent.token("work") == first
        assert agent.authctl("status", timeout=10).returncode == 0


def test_sighup_reloads_and_a_changed_issuer_starts_from_the_keyring(signed_in_agent, auth_server):
    agent = signed_in_agent
    first = agent.token("work")
    # Only the access policy changes: the tokens stay. Then a scope change: the cached token goes, the refresh
    # token in the keyring brings a new one.
    agent.write_config(render_config({"work": default_account(auth_server.issuer, allowed_clients=["/usr/bin/git"])}))
    agent.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: agent.account_status("work").get("access", {}).get("allowed_clients") == ["/usr/bin/git"],
             10, "SIGHUP to put the new access policy in force")
    assert agent.alive()
    assert "configuration reloaded (SIGHUP)" in agent.log()

    posts = auth_server.token_posts()
    agent.write_config(render_config({"work": default_account(auth_server.issuer, scopes=["openid", "offline_access"])}))
    result = agent.authctl("reload", "--json", timeout=20)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["changed"] == ["work"]
    second = agent.token("work")
    assert second != first, "new token settings: the cached token is not served"
    assert auth_server.token_posts() == posts + 1, "one refresh with the refresh token from the keyring"
    assert agent.account_status("work")["signed_in"] is True


def test_status_line_names_the_configuration_problem(make_agent, auth_server):
    """The STATUS= line systemd shows: the problem, then, once fixed, the accounts served."""
    good = render_config({"work": default_account(auth_server.issuer)})
    notify_dir = short_tmpdir("aa-ntf-")
    notify_path = notify_dir / "notify.sock"
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(str(notify_path))
    notify.settimeout(10)
    try:
        agent = make_agent(config_text=broken(good), start=False, env={"NOTIFY_SOCKET": str(notify_path)})
        start_without_waiting(agent)
        seen = []
        deadline = time.monotonic() + 10
        while not any("READY=1" in m for m in seen) and time.monotonic() < deadline:
            seen.append(notify.recv(4096).decode())
        ready = next(m for m in seen if "READY=1" in m)
        assert "STATUS=Configuration error:" in ready and "frobnicate" in ready, seen
        agent.write_config(good)
        assert agent.authctl("status", timeout=10).returncode == 0
        while not any(m.startswith("STATUS=Serving 1 account") for m in seen) and time.monotonic() < deadline + 10:
            seen.append(notify.recv(4096).decode())
        assert any(m.startswith("STATUS=Serving 1 account") for m in seen), seen
    finally:
        notify.close()


# ---------------------------------------------------------------------------------------------------------------
# authctl never waits forever


class SilentAgent:
    """A socket that accepts connections and never answers (a stopped or wedged agent)."""

    def __init__(self, path, accept=True):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(str(path))
        self.sock.listen(0)
        self.held = []
        self.stop = threading.Event()
        if accept:
            threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        self.sock.settimeout(0.1)
        while not self.stop.is_set():
            try:
                self.held.append(self.sock.accept()[0])
            except OSError:
                continue

    def close(self):
        self.stop.set()
        for s in self.held:
            s.close()
        self.sock.close()


@pytest.mark.parametrize("verb", [["status"], ["token", "work"], ["git-credential", "--account", "work", "get"],
                                  ["reload"], ["logout", "work"], ["grant", "ci", "--account", "work"]])
def test_a_silent_agent_gives_exit_11_at_the_time_limit(make_agent, verb):
    agent = make_agent(start=False)
    path = agent.socket_path
    path.parent.mkdir(mode=0o700, exist_ok=True)
    silent = SilentAgent(path)
    try:
        stdin = "protocol=https\nhost=example.com\n\n" if verb[0] == "git-credential" else None
        started = time.monotonic()
        result = agent.authctl(*verb, "--timeout", "1", input=stdin, timeout=20, check_log=False)
        elapsed = time.monotonic() - started
        assert result.returncode == 11, (result.returncode, result.stderr)
        assert "did not answer within 1 s" in result.stderr
        assert elapsed < 15, elapsed
    finally:
        silent.close()


def test_a_full_listen_queue_gives_exit_11_after_the_connect_limit(make_agent):
    agent = make_agent(start=False)
    path = agent.socket_path
    path.parent.mkdir(mode=0o700, exist_ok=True)
    silent = SilentAgent(path, accept=False)
    fillers = []
    try:
        # Fill the queue (backlog 0 takes one, the kernel allows one more): the next connect() blocks.
        for _ in range(8):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.setblocking(False)
            try:
                s.connect(str(path))
            except BlockingIOError:
                s.close()
                break
            fillers.append(s)
        result = agent.authctl("status", timeout=30, check_log=False)
        assert result.returncode == 11, (result.returncode, result.stderr)
        assert "did not accept the connection" in result.stderr
    finally:
        for s in fillers:
            s.close()
        silent.close()


def test_a_stopped_agent_is_a_timeout_not_a_hang(signed_in_agent):
    agent = signed_in_agent
    os.kill(agent.proc.pid, signal.SIGSTOP)
    try:
        result = agent.authctl("status", "--timeout", "2", timeout=20, check_log=False)
        assert result.returncode == 11, (result.returncode, result.stderr)
    finally:
        os.kill(agent.proc.pid, signal.SIGCONT)
    assert agent.authctl("status", timeout=10).returncode == 0
