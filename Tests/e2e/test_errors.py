"""Bad input and failures: each checks the exit code, the message, that the agent stays up and that the refresh
token is not lost."""
import json
import os
import signal
import socket
import stat
import subprocess
import time
import pytest

from conftest import (CLIENT_ID, SYSTEM_PATH, assert_no_reply, connection_closed, default_account, file_mode,
                      kill_pid, read_replies, read_until, render_config, run_binary, short_tmpdir, wait_for)


def assert_alive(agent):
    assert agent.alive(), f"the agent died:\n{agent.log()[-2000:]}"
    ping = agent.raw(b'{"v":1,"id":99,"op":"ping"}\n')
    assert ping and ping[0]["id"] == 99 and ping[0]["result"]["protocol"] == 1, ping
    assert agent.authctl("status").returncode == 0


# ---------------------------------------------------------------------------------------------------------------
# Requests the agent must refuse


def test_unknown_account(signed_in_agent, keyring, auth_server):
    agent = signed_in_agent
    result = agent.authctl("token", "nope")
    assert result.returncode == 8, (result.returncode, result.stderr)
    assert "nope" in result.stderr
    assert "authctl accounts" in result.stderr  # the hint
    assert result.stdout == ""
    assert agent.authctl("login", "nope").returncode == 8
    assert agent.authctl("logout", "nope").returncode == 8
    assert_alive(agent)
    assert keyring.secret_tool_count("work") == 1


def test_malformed_socket_requests(signed_in_agent, keyring):
    agent = signed_in_agent

    (reply,) = agent.raw(b"{not json\n")
    assert reply["v"] == 1 and reply["error"]["code"] == "bad_request"

    (reply,) = agent.raw(b'{"v":2,"id":7,"op":"ping"}\n')
    assert reply["error"]["code"] == "unsupported_version" and reply["id"] == 7

    (reply,) = agent.raw(b'{"id":8,"op":"ping"}\n')
    assert reply["error"]["code"] == "bad_request" and reply["id"] == 8

    (reply,) = agent.raw(b'{"v":1,"id":9,"op":"frobnicate"}\n')
    assert reply["error"]["code"] == "unknown_op" and reply["id"] == 9

    (reply,) = agent.raw(b'{"v":1,"id":10,"op":"token"}\n')
    assert reply["error"]["code"] == "bad_request" and reply["id"] == 10
    assert "account" in reply["error"]["message"]

    (reply,) = agent.raw(b'{"v":1,"id":11,"op":"token","account":"work","min_valid":"soon"}\n')
    assert reply["error"]["code"] == "bad_request" and reply["id"] == 11

    (reply,) = agent.raw(b'{"v":1,"id":12,"op":"token","account":"work","min_valid":-1}\n')
    assert reply["error"]["code"] == "bad_request" and reply["id"] == 12

    (reply,) = agent.raw(b'[1,2,3]\n')
    assert reply["error"]["code"] == "bad_request"

    (reply,) = agent.raw(b'{"v":1,"id":13,"op":"\xff\xfe"}\n')
    assert reply["error"]["code"] == "bad_request"

    # A line over 64 KiB: message_too_large, then the connection is closed.
    with agent.connect() as s:
        try:
            s.sendall(b'{"v":1,"id":14,"op":"ping","pad":"' + b"x" * 70000 + b'"}\n')
        except (BrokenPipeError, ConnectionResetError):
            pass
        replies = read_replies(s, 1, 10)
        assert replies and replies[0]["error"]["code"] == "message_too_large", replies
        assert connection_closed(s, 5), "the connection stayed open after message_too_large"

    # A line that is too long without any newline yet is refused too (never buffered past the cap).
    with agent.connect() as s:
        try:
            s.sendall(b"y" * 70000)
        except (BrokenPipeError, ConnectionResetError):
            pass
        replies = read_replies(s, 1, 10)
        assert replies and replies[0]["error"]["code"] == "message_too_large", replies
        assert connection_closed(s, 5)

    # Several requests on one connection: one reply each, matched by id; the connection stays usable after a bad line.
    lines = [b'{"v":1,"id":21,"op":"ping"}', b'garbage', b'{"v":1,"id":22,"op":"status"}',
             b'{"v":1,"id":23,"op":"accounts"}', b'{"v":1,"id":24,"op":"token","account":"work"}']
    with agent.connect() as s:
        s.sendall(b"\n".join(lines) + b"\n")
        replies = read_replies(s, 5, 15)
    assert len(replies) == 5, replies
    by_id = {r.get("id"): r for r in replies}
    assert by_id[21]["result"]["protocol"] == 1
    assert by_id[22]["result"]["agent"]["keyring"] == "available"
    assert by_id[23]["result"]["accounts"][0]["redirect_uri"] == "http://127.0.0.1/oauth2/callback/work"
    assert by_id[24]["result"]["token_type"] == "Bearer"
    agent.remember(by_id[24]["result"]["access_token"])
    assert "refresh_token" not in json.dumps(by_id[24]), "the refresh token must never cross the socket"
    assert by_id[None]["error"]["code"] == "bad_request"

    # A request without a trailing newline, followed by a half-close, is still answered.
    with agent.connect() as s:
        s.sendall(b'{"v":1,"id":31,"op":"ping"}')
        s.shutdown(socket.SHUT_WR)
        replies = read_replies(s, 1, 10)
    assert replies and replies[0]["id"] == 31 and "result" in replies[0]

    # A client that sends half a line and then sits there does not block anybody else.
    with agent.connect() as slow:
        slow.sendall(b'{"v":1,"id":41,"op":')
        assert agent.authctl("status").returncode == 0
        assert agent.token("work")

    assert_alive(agent)
    assert keyring.secret_tool_count("work") == 1


def test_client_that_disconnects_cancels_its_sign_in(make_agent, keyring):
    agent = make_agent(browser_mode="none")
    s = agent.connect()
    try:
        s.sendall(b'{"v":1,"id":1,"op":"login","account":"work"}\n')
        (event,) = read_replies(s, 1, 15)
        assert event["id"] == 1
        assert event["event"]["type"] == "login_started"
        assert event["event"]["browser_opened"] is True
        assert event["event"]["timeout_s"] == 30
        redirect_port = int(event["event"]["redirect_uri"].split(":")[2].split("/")[0])
        assert agent.account_status("work")["login_pending"] is True
    finally:
        s.close()
    # Well before the sign-in's own 30 s timeout (each poll is an authctl process: slow on a loaded machine).
    wait_for(lambda: agent.account_status("work")["login_pending"] is False, 10, "the sign-in to be cancelled",
             interval=0.1)
    # The loopback listener went away with it.
    with socket.socket() as probe:
        probe.settimeout(2)
        assert probe.connect_ex(("127.0.0.1", redirect_port)) != 0, "the redirect listener is still open"
    assert "sign-in cancelled" in agent.log()
    assert_alive(agent)
    assert keyring.secret_tool_count("work") == 0


# ---------------------------------------------------------------------------------------------------------------
# Keyring


def test_a_secret_service_that_appears_later_is_used_without_a_restart(make_agent, bus_without_keyring, auth_server):
    """`store = "secret-service"`: the agent starts on a session bus with no Secret Service: status says so with
    what to do, a token request fails as keyring_unavailable (exit 5), nothing crashes. Then a real
    gnome-keyring-daemon is started and unlocked on the same bus: without restarting the agent, status shows it
    available and a sign-in and a token work. (The default, `auto`: test_memory_store.py.)"""
    agent = make_agent(bus=bus_without_keyring, agent={"store": "secret-service"})
    pid = agent.proc.pid
    status = agent.status_json()
    assert status["agent"]["keyring"] == "absent"
    assert status["accounts"][0].get("signed_in") is None
    text = agent.authctl("status").stdout
    assert "keyring: absent (start gnome-keyring-daemon" in text and "store = \"auto\"" in text, text
    token = agent.authctl("token", "work")
    assert token.returncode == 5 and token.stdout == "", (token.returncode, token.stderr)
    assert "keyring_unavailable" in token.stderr or "Secret Service" in token.stderr, token.stderr
    assert agent.status_json()["accounts"][0]["last_error"]["code"] == "keyring_unavailable"
    assert_alive(agent)

    bus_without_keyring.start_keyring()  # the same bus: what logging in to a desktop session later does
    status = agent.status_json()
    assert status["agent"]["keyring"] == "available", status
    assert status["accounts"][0].get("signed_in") is False
    assert "keyring: available" in agent.authctl("status").stdout
    agent.login("work")
    rt = bus_without_keyring.secret_tool_lookup("work", auth_server.issuer)
    assert rt, "the sign-in did not reach the keyring that appeared"
    agent.remember(rt)
    access = agent.token("work")
    assert auth_server.introspect(access)["active"] is True
    assert agent.status_json()["accounts"][0]["signed_in"] is True
    assert agent.proc.pid == pid and agent.alive(), "the agent was not restarted"
    assert_alive(agent)


def test_locked_keyring_is_reported_as_locked(signed_in_agent, keyring, auth_server):
    agent = signed_in_agent
    rt = keyring.secret_tool_lookup("work", auth_server.issuer)
    keyring.lock()
    posts = auth_server.token_posts()

    result = agent.authctl("token", "work", "--refresh")
    assert result.returncode == 5, (result.returncode, result.stderr)
    assert "locked" in result.stderr
    assert "authctl login" not in result.stderr, "a locked keyring must not look like 'not signed in'"
    assert auth_server.token_posts() == posts

    status = agent.status_json()
    assert status["agent"]["keyring"] == "locked"
    (account,) = status["accounts"]
    assert account.get("signed_in") is None, "signed_in must be unknown (null) while the keyring is locked"
    assert account["last_error"]["code"] == "keyring_locked"
    text = agent.authctl("status").stdout
    assert "keyring: locked" in text and "not signed in" not in text

    assert_alive(agent)
    keyring.unlock()
    assert keyring.secret_tool_lookup("work", auth_server.issuer) == rt, "the refresh token was lost"
    token = agent.token("work", "--refresh")
    assert auth_server.introspect(token)["active"] is True
    assert agent.status_json()["agent"]["keyring"] == "available"
    new_rt = keyring.secret_tool_lookup("work", auth_server.issuer)
    assert new_rt and new_rt != rt
    agent.remember(new_rt)
    assert keyring.secret_tool_count("work") == 1


def test_login_with_a_locked_keyring_fails_as_locked(agent, keyring, auth_server):
    """The lock is found before the user is sent to sign in (a sign-in would have nowhere to go), and the hint is
    the GNOME keyring's. Under the default `store = "auto"`: a locked keyring is never taken for a missing one (no
    memory fallback)."""
    keyring.lock()
    result = agent.authctl("login", "work")
    assert result.returncode == 5, (result.returncode, result.stdout, result.stderr)
    assert "locked" in result.stderr
    assert "kept_in_memory" not in agent.account_status("work")
    assert "kept in memory" not in agent.log()
    assert "hint: unlock the login keyring" in result.stderr and "Seahorse" in result.stderr, result.stderr
    assert agent.browser_runs() == 0, "the browser was started for a sign-in that could not be stored"
    keyring.unlock()
    assert keyring.secret_tool_count("work") == 0
    assert agent.authctl("token", "work").returncode == 4


def _files_under(root):
    found = set()
    for directory, _, files in os.walk(root):
        for name in files:
            if not os.path.isfile(os.path.join(directory, name)):
                continue  # the socket
            found.add(os.path.relpath(os.path.join(directory, name), root))
    return found


def test_no_secret_service(make_agent, bus_without_keyring, auth_server):
    """`store = "secret-service"`: no Secret Service is keyring_unavailable, never a file."""
    agent = make_agent(bus=bus_without_keyring, agent={"store": "secret-service"})
    status = agent.status_json()
    assert status["agent"]["keyring"] == "absent"
    assert status["accounts"][0].get("signed_in") is None
    before_files = _files_under(agent.base)
    posts = auth_server.token_posts()

    result = agent.authctl("login", "work")
    assert result.returncode == 5, (result.returncode, result.stdout, result.stderr)
    assert "Secret Service" in result.stderr or "keyring" in result.stderr
    assert "Signed in" not in result.stdout
    assert auth_server.token_posts() == posts + 1, "the code exchange itself should have happened"

    token = agent.authctl("token", "work")
    assert token.returncode == 5, (token.returncode, token.stderr)
    assert "authctl login" not in token.stderr, "a missing keyring must not look like 'not signed in'"

    status = agent.status_json()
    assert status["agent"]["keyring"] == "absent"
    assert status["accounts"][0].get("signed_in") is None
    assert status["accounts"][0]["last_error"]["code"] == "keyring_unavailable"
    assert "keyring: absent" in agent.authctl("status").stdout

    # No plaintext fallback: no new file anywhere in the agent's HOME / XDG dirs, and the refresh token the server
    # issued is in no file there (nor in the log: the canary checks that at teardown).
    new_files = _files_under(agent.base) - before_files
    assert new_files == set(), f"files created: {new_files}"
    secrets = auth_server.issued_secrets()
    for rel in _files_under(agent.base):
        data = (agent.base / rel).read_bytes()
        for secret in secrets:
            assert secret.encode() not in data, f"a token is stored in {rel}"
    assert_alive(agent)


# ---------------------------------------------------------------------------------------------------------------
# The authorization server


def test_server_unreachable_keeps_the_refresh_token(make_agent, keyring, private_auth_server):
    server = private_auth_server
    agent = make_agent(server=server)
    agent.login("work")
    rt = keyring.secret_tool_lookup("work", server.issuer)
    assert rt
    server.stop()

    result = agent.authctl("token", "work", "--refresh", timeout=90)
    assert result.returncode == 6, (result.returncode, result.stderr)
    assert "authctl login" not in result.stderr
    assert "keeps your sign-in" in result.stderr  # the hint
    assert agent.account_status("work")["last_error"]["code"] == "server_unreachable"
    assert keyring.secret_tool_lookup("work", server.issuer) == rt, "the refresh token was dropped"
    assert_alive(agent)

    server.restart()
    token = agent.token("work", "--refresh")
    assert server.introspect(token)["active"] is True
    new_rt = keyring.secret_tool_lookup("work", server.issuer)
    assert new_rt and new_rt != rt
    assert agent.account_status("work").get("last_error") is None


def test_revoked_refresh_token_means_sign_in_required(signed_in_agent, keyring, auth_server):
    agent = signed_in_agent
    rt = keyring.secret_tool_lookup("work", auth_server.issuer)
    assert auth_server.revoke(rt) == 200

    result = agent.authctl("token", "work", "--refresh")
    assert result.returncode == 4, (result.returncode, result.stderr)
    assert "authctl login work" in result.stderr
    assert keyring.secret_tool_lookup("work", auth_server.issuer) is None
    assert keyring.secret_tool_count("work") == 0
    account = agent.account_status("work")
    assert account["last_error"]["code"] == "login_required"
    assert account["signed_in"] is False
    assert agent.authctl("token", "work").returncode == 4
    assert_alive(agent)

    # Signing in again recovers.
    agent.login("work")
    assert agent.token("work")
    agent.remember(keyring.secret_tool_lookup("work", auth_server.issuer))


# ---------------------------------------------------------------------------------------------------------------
# The browser and the redirect


def _start_login(agent, env=None):
    proc = agent.authctl_popen("login", "work", env=env)
    try:
        text = read_until(proc.stderr, "Waiting for the sign-in", 20)
    except AssertionError:
        proc.kill()
        proc.communicate(timeout=10)
        raise
    return proc, text


def _interrupt(agent, proc):
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=10)
    assert proc.returncode != 0
    wait_for(lambda: agent.account_status("work")["login_pending"] is False, 10,
             "the sign-in to be cancelled after Ctrl-C", interval=0.1)
    # Ended by the cancellation, not by the account's own sign-in timeout.
    assert "sign-in cancelled: nobody is waiting for it" in agent.log()


def test_browser_that_fails_still_shows_the_url(make_agent, keyring, auth_server):
    agent = make_agent(browser_mode="fail", work={"login_timeout": 10})
    proc, stderr = _start_login(agent)
    assert f"http://127.0.0.1:{auth_server.port}/o/authorize/?" in stderr
    # The program started (it then exited 1): from the agent's point of view the browser was opened.
    assert "Opened your browser" in stderr
    assert agent.account_status("work")["login_pending"] is True
    wait_for(lambda: "FAIL simulated browser failure" in agent.browser_log.read_text(), 10, "the fake browser to run")
    _interrupt(agent, proc)
    assert_alive(agent)


def test_no_browser_at_all(make_agent, keyring, auth_server):
    empty = short_tmpdir("aa-path-")
    try:
        agent = make_agent(env={"BROWSER": "/nonexistent/browser", "PATH": str(empty)},
                           work={"login_timeout": 10})
        proc, stderr = _start_login(agent, env={"PATH": SYSTEM_PATH})
        assert "Could not open a browser" in stderr
        assert f"http://127.0.0.1:{auth_server.port}/o/authorize/?" in stderr
        assert "code_challenge_method=S256" in stderr
        assert agent.browser_runs() == 0
        _interrupt(agent, proc)
        assert_alive(agent)
    finally:
        empty.rmdir()


def test_login_timeout(make_agent, keyring):
    agent = make_agent(browser_mode="none", work={"login_timeout": 10})
    started = time.monotonic()
    result = agent.authctl("login", "work", timeout=40)
    elapsed = time.monotonic() - started
    assert result.returncode == 7, (result.returncode, result.stderr)
    assert 9 <= elapsed < 20, elapsed
    assert "10 s" in result.stderr or "time" in result.stderr
    assert agent.account_status("work")["login_pending"] is False
    assert agent.account_status("work")["last_error"]["code"] == "login_timeout"
    assert_alive(agent)


def test_wrong_state_is_ignored_and_the_real_response_wins(make_agent, keyring, auth_server):
    agent = make_agent(browser_mode="wrong-state")
    result = agent.authctl("login", "work")
    assert result.returncode == 0, result.stderr
    log = agent.browser_log.read_text()
    assert "GET /oauth2/callback/work -> 400 (callback, wrong state)" in log
    assert "DONE wrong-state callback=200" in log
    assert "state does not match" in agent.log()
    assert keyring.secret_tool_count("work") == 1
    agent.remember(keyring.secret_tool_lookup("work", auth_server.issuer))


def test_denied_sign_in(make_agent, keyring):
    agent = make_agent(browser_mode="deny")
    result = agent.authctl("login", "work")
    assert result.returncode == 7, (result.returncode, result.stderr)
    assert "denied" in result.stderr
    # The browser process logs DONE after it reads the listener's reply, which can be after authctl returned.
    wait_for(lambda: "DONE deny callback=200" in agent.browser_log.read_text(), 10, "the browser to finish")
    assert keyring.secret_tool_count("work") == 0
    assert agent.account_status("work")["last_error"]["code"] == "access_denied"
    assert_alive(agent)


# ---------------------------------------------------------------------------------------------------------------
# Configuration and start-up


def _check_config(tmp, text, mode=0o600, extra_args=("--check-config",)):
    config_home = tmp / "config"
    (config_home / "auth-agent").mkdir(parents=True, exist_ok=True, mode=0o700)
    path = config_home / "auth-agent" / "config.toml"
    path.write_text(text)
    path.chmod(mode)
    env = {"PATH": SYSTEM_PATH, "HOME": str(tmp), "XDG_CONFIG_HOME": str(config_home)}
    return run_binary("auth-agent", list(extra_args), env), path


GOOD = """[accounts.work]
issuer = "https://issuer.example.test/o"
client_id = "auth-agent-test"
scopes = ["openid", "email"]
"""


def test_check_config_accepts_a_good_file(tmp_path):
    result, path = _check_config(tmp_path, GOOD)
    assert result.returncode == 0, result.stderr
    assert "1 account(s)" in result.stdout
    assert "http://127.0.0.1/oauth2/callback/work" in result.stdout


def test_config_unknown_key(tmp_path):
    result, _ = _check_config(tmp_path, GOOD + 'colour = "blue"\n')
    assert result.returncode == 78, result.stderr
    assert "config.toml:5:" in result.stderr
    assert "colour" in result.stderr


def test_config_missing_client_id(tmp_path):
    result, _ = _check_config(tmp_path, '[accounts.work]\nissuer = "https://issuer.example.test/o"\n')
    assert result.returncode == 78, result.stderr
    assert "client_id" in result.stderr
    assert "config.toml:1:" in result.stderr


def test_config_plain_http_issuer(tmp_path):
    result, _ = _check_config(tmp_path, GOOD.replace("https://issuer.example.test/o", "http://example.com"))
    assert result.returncode == 78, result.stderr
    assert "https" in result.stderr
    assert "config.toml:2:" in result.stderr


# Also on the release build and the package: toml++ reports a syntax error by throwing a C++ exception that TOMLKit
# catches, and the release link drops unwind tables from Swift code only (packaging/link/lld-without-swift-unwind-
# tables); were C++'s dropped too, this would be std::terminate, not exit 78.
@pytest.mark.release
def test_config_bad_toml(tmp_path):
    result, _ = _check_config(tmp_path, GOOD + "scopes = [\n\n")
    assert result.returncode == 78, result.stderr
    assert "config.toml:" in result.stderr
    assert "TOML" in result.stderr
    result, _ = _check_config(tmp_path, '[accounts.work]\nissuer = "https://x.example/o"\nclient_id = = 3\n')
    assert result.returncode == 78, result.stderr
    assert "config.toml:3:" in result.stderr


def test_config_writable_by_others_is_refused(tmp_path):
    result, path = _check_config(tmp_path, GOOD, mode=0o666)
    assert result.returncode == 78, result.stderr
    assert "writable by group or others" in result.stderr
    assert f"chmod go-w {path}" in result.stderr


def test_runtime_dir_must_be_set_and_private(make_agent, bus_without_keyring):
    agent = make_agent(bus=bus_without_keyring, env={"XDG_RUNTIME_DIR": None}, start=False)
    result = run_binary("auth-agent", [], agent.env, timeout=30)
    assert result.returncode != 0
    assert "XDG_RUNTIME_DIR" in result.stderr

    agent = make_agent(bus=bus_without_keyring, start=False)
    agent.runtime.chmod(0o755)
    result = run_binary("auth-agent", [], agent.env, timeout=30)
    assert result.returncode != 0
    assert "XDG_RUNTIME_DIR" in result.stderr and "chmod 700" in result.stderr
    assert not agent.socket_path.exists()

    # A socket directory that exists with the wrong mode is refused too.
    agent.runtime.chmod(0o700)
    (agent.runtime / "auth-agent").mkdir(mode=0o755)
    (agent.runtime / "auth-agent").chmod(0o755)
    result = run_binary("auth-agent", [], agent.env, timeout=30)
    assert result.returncode != 0
    assert "socket directory" in result.stderr


def test_socket_and_directory_modes(agent):
    info = os.stat(agent.socket_path)
    assert stat.S_ISSOCK(info.st_mode)
    assert file_mode(agent.socket_path) == 0o600
    assert file_mode(agent.socket_path.parent) == 0o700
    assert info.st_uid == os.getuid()


def test_stale_socket_and_second_agent(agent, keyring):
    agent.kill9()
    assert agent.socket_path.exists(), "expected a stale socket after SIGKILL"
    down = agent.authctl("status")
    assert down.returncode == 3, (down.returncode, down.stderr)
    agent.start()
    assert agent.authctl("status").returncode == 0

    second = run_binary("auth-agent", [], agent.env, timeout=30)
    assert second.returncode != 0
    assert "already" in second.stderr
    assert agent.socket_path.exists()
    assert agent.status_json()["agent"]["pid"] == agent.proc.pid
    agent.stop()
    assert not agent.socket_path.exists(), "the agent should remove its socket on a clean exit"


def test_agent_not_running(tmp_path):
    env = {"PATH": SYSTEM_PATH, "HOME": str(tmp_path), "AUTH_AGENT_SOCKET": "/tmp/nonexistent/x.sock"}
    result = run_binary("authctl", ["status"], env)
    assert result.returncode == 3, (result.returncode, result.stderr)
    assert "not running" in result.stderr
    assert "/tmp/nonexistent/x.sock" in result.stderr
    assert "hint:" in result.stderr

    result = run_binary("authctl", ["token", "work"], {"PATH": SYSTEM_PATH, "HOME": str(tmp_path)})
    assert result.returncode == 3, (result.returncode, result.stderr)
    assert "XDG_RUNTIME_DIR" in result.stderr

    result = run_binary("authctl", ["frobnicate"], env)
    assert result.returncode == 2, (result.returncode, result.stderr)


def _http(port, request: bytes, host="127.0.0.1") -> tuple[int, dict, bytes]:
    with socket.create_connection((host, port), timeout=10) as s:
        s.sendall(request)
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        key, _, value = line.partition(":")
        headers[key.strip().lower()] = value.strip()
    return status, headers, body


def test_redirect_listener_rules(make_agent, keyring):
    """SECURITY.md 5-7: loopback literal only, exact path, GET only, exact Host, static no-store pages, and a
    response with a wrong state neither completes nor ends the sign-in."""
    agent = make_agent(browser_mode="none")
    s = agent.connect(timeout=30)
    try:
        s.sendall(b'{"v":1,"id":1,"op":"login","account":"work"}\n')
        (event,) = read_replies(s, 1, 15)
        redirect = event["event"]["redirect_uri"]
        port = int(redirect.split(":")[2].split("/")[0])
        assert redirect == f"http://127.0.0.1:{port}/oauth2/callback/work"
        host = f"Host: 127.0.0.1:{port}\r\n".encode()

        status, headers, body = _http(port, b"GET /oauth2/callback/work?code=x&state=forged HTTP/1.1\r\n" + host +
                                      b"Connection: close\r\n\r\n")
        assert status == 400
        assert headers["cache-control"] == "no-store"
        assert headers["referrer-policy"] == "no-referrer"
        assert b"forged" not in body, "the page echoes request parameters"

        status, _, _ = _http(port, b"GET /oauth2/callback/personal?code=x&state=y HTTP/1.1\r\n" + host +
                             b"Connection: close\r\n\r\n")
        assert status == 404
        status, _, _ = _http(port, b"POST /oauth2/callback/work?code=x&state=y HTTP/1.1\r\n" + host +
                             b"Content-Length: 0\r\nConnection: close\r\n\r\n")
        assert status == 405
        status, _, _ = _http(port, b"GET /oauth2/callback/work?code=x&state=y HTTP/1.1\r\n"
                             b"Host: localhost:%d\r\nConnection: close\r\n\r\n" % port)
        assert status == 400
        # Only the IPv4 literal is bound.
        with socket.socket(socket.AF_INET6) as v6:
            v6.settimeout(2)
            assert v6.connect_ex(("::1", port)) != 0, "the redirect listener also listens on ::1"

        # An error response with a wrong state is ignored: the sign-in is still pending.
        status, _, _ = _http(port, b"GET /oauth2/callback/work?error=access_denied&state=forged HTTP/1.1\r\n" +
                             host + b"Connection: close\r\n\r\n")
        assert status == 400
        assert agent.account_status("work")["login_pending"] is True
        assert_no_reply(s, "the sign-in ended on a forged response")
    finally:
        s.close()
    wait_for(lambda: agent.account_status("work")["login_pending"] is False, 3, "the sign-in to be cancelled")
    assert_alive(agent)


def test_process_hardening(agent):
    """SECURITY.md 22-23: no core dumps, SIGPIPE ignored."""
    pid = agent.proc.pid
    limits = open(f"/proc/{pid}/limits").read()
    core = next(line for line in limits.splitlines() if line.startswith("Max core file size"))
    assert core.split()[4:6] == ["0", "0"], core
    status = dict(line.split(":\t", 1) for line in open(f"/proc/{pid}/status").read().splitlines() if ":\t" in line)
    ignored = int(status["SigIgn"].strip(), 16)
    assert ignored & (1 << (signal.SIGPIPE - 1)), "SIGPIPE is not ignored"
    assert int(status["Umask"].strip(), 8) & 0o077 == 0o077, status["Umask"]


def test_logout_with_a_locked_keyring_is_reported_as_locked(signed_in_agent, keyring, auth_server):
    """SECURITY.md 17/19: a locked keyring hides its items; logout must say "locked", not "was not signed in"
    (and must not leave the refresh token behind while claiming success)."""
    agent = signed_in_agent
    rt = keyring.secret_tool_lookup("work", auth_server.issuer)
    keyring.lock()
    result = agent.authctl("logout", "work")
    keyring.unlock()
    still_stored = keyring.secret_tool_lookup("work", auth_server.issuer)
    assert "was not signed in" not in result.stdout, (
        f"logout with a locked keyring claimed 'not signed in' (exit {result.returncode}); the refresh token is "
        f"{'still in the keyring (not revoked, not deleted)' if still_stored == rt else 'gone'}")
    assert result.returncode == 5, (result.returncode, result.stdout, result.stderr)
    assert "locked" in result.stderr


def test_logout_when_the_server_is_down_still_forgets_locally(make_agent, keyring, private_auth_server):
    server = private_auth_server
    agent = make_agent(server=server)
    agent.login("work")
    assert keyring.secret_tool_count("work") == 1
    server.stop()
    result = agent.authctl("logout", "work", timeout=90)
    assert result.returncode == 0, (result.returncode, result.stderr)
    assert "deleted from the keyring" in result.stdout
    assert "warning: revocation at the server failed" in result.stderr
    assert keyring.secret_tool_count("work") == 0
    assert agent.authctl("token", "work").returncode == 4


def test_a_keyring_daemon_that_restarts_is_found_again(signed_in_agent, keyring, auth_server):
    """The Secret Service is restarted under a running agent (gnome-keyring-daemon restarted; the same happens when
    KeePassXC is quit and started again): the agent's next keyring calls go to the new owner of the name, so the
    sign-in in its keyring is found and a rotation is written there, never read as "no sign-in"."""
    agent = signed_in_agent
    before = keyring.secret_tool_lookup("work", auth_server.issuer)
    assert agent.authctl("token", "work", "--refresh").returncode == 0  # the agent has used the first daemon
    used = keyring.secret_tool_lookup("work", auth_server.issuer)
    assert used != before
    kill_pid(keyring.daemon_pid)
    keyring.start_keyring()
    assert keyring.secret_tool_lookup("work", auth_server.issuer) == used, "the keyring file kept the item"
    result = agent.authctl("token", "work", "--refresh")
    assert result.returncode == 0, (result.returncode, result.stderr)
    agent.remember(result.stdout.strip())
    rotated = keyring.secret_tool_lookup("work", auth_server.issuer)
    agent.remember(rotated)
    assert rotated not in (None, used), "the rotation was not written to the restarted keyring"
    assert agent.account_status("work")["signed_in"] is True


def test_stuck_keyring_blocks_nobody_else(signed_in_agent, keyring, auth_server):
    """A keyring that does not answer (daemon stopped) delays only the requests that need it."""
    agent = signed_in_agent
    cached = agent.token("work")
    os.kill(keyring.daemon_pid, signal.SIGSTOP)
    try:
        waiting = agent.authctl_popen("token", "work", "--refresh")
        time.sleep(0.5)
        assert waiting.poll() is None, "the refresh did not wait for the keyring"
        started = time.monotonic()
        (ping,) = agent.raw(b'{"v":1,"id":5,"op":"ping"}\n', timeout=5)
        assert ping["id"] == 5
        assert agent.token("work") == cached  # served from memory
        # A block would last the keyring call's 20 s deadline.
        assert time.monotonic() - started < 5, "a stuck keyring blocked requests that do not need it"
    finally:
        os.kill(keyring.daemon_pid, signal.SIGCONT)
    out, err = waiting.communicate(timeout=40)
    assert waiting.returncode == 0, (waiting.returncode, err)
    assert out.strip() != cached
    agent.remember(out.strip(), keyring.secret_tool_lookup("work", auth_server.issuer))


def test_sigterm_with_an_idle_client_connected(agent):
    """SIGTERM must stop the agent promptly (systemctl stop) even while a client holds a connection open."""
    idle = agent.connect()
    try:
        idle.sendall(b'{"v":1,"id":1,')  # half a request, then nothing
        time.sleep(0.2)
        agent.proc.send_signal(signal.SIGTERM)
        try:
            rc = agent.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            rc = None
        assert rc is not None, "auth-agent did not exit within 5 s of SIGTERM while a client was connected"
        assert rc == 0
    finally:
        idle.close()


def test_sigterm_during_a_pending_sign_in(make_agent):
    agent = make_agent(browser_mode="none")
    login = agent.authctl_popen("login", "work")
    try:
        read_until(login.stderr, "Waiting for the sign-in", 20)
        agent.proc.send_signal(signal.SIGTERM)
        try:
            rc = agent.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            rc = None
        assert rc is not None, "auth-agent did not exit within 5 s of SIGTERM while a sign-in was pending"
        assert rc == 0
        login.communicate(timeout=10)
        assert login.returncode != 0
    finally:
        if login.poll() is None:
            login.kill()
            login.communicate(timeout=10)


def test_sigint_stops_the_agent_cleanly(agent):
    agent.proc.send_signal(signal.SIGINT)
    assert agent.proc.wait(timeout=15) == 0
    assert not agent.socket_path.exists()


def test_files_owned_by_someone_else_are_refused(make_agent, bus_without_keyring, tmp_path):
    result, path = _check_config(tmp_path, GOOD)
    assert result.returncode == 0
    os.chown(path, 65534, 65534)  # the test runs as root; the agent runs as root too, so this is "someone else"
    result = run_binary("auth-agent", ["--check-config"],
                        {"PATH": SYSTEM_PATH, "HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "config")})
    assert result.returncode == 78, result.stderr
    assert "uid 65534" in result.stderr

    agent = make_agent(bus=bus_without_keyring, start=False)
    os.chown(agent.runtime, 65534, 65534)
    result = run_binary("auth-agent", [], agent.env, timeout=30)
    assert result.returncode != 0
    assert "XDG_RUNTIME_DIR" in result.stderr and "uid 65534" in result.stderr


def test_socket_path_taken_by_a_regular_file(make_agent, bus_without_keyring):
    agent = make_agent(bus=bus_without_keyring, start=False)
    agent.socket_path.parent.mkdir(mode=0o700)
    agent.socket_path.write_text("not a socket")
    result = run_binary("auth-agent", [], agent.env, timeout=30)
    assert result.returncode != 0
    assert "not a socket" in result.stderr
    assert agent.socket_path.read_text() == "not a socket", "the agent removed a file that is not its socket"


def test_min_valid_bounds(signed_in_agent, auth_server):
    agent = signed_in_agent
    token = agent.token("work")
    posts = auth_server.token_posts()
    assert agent.token("work", "--min-valid", "3000") == token
    assert auth_server.token_posts() == posts, "a token valid for 3000 s more was refreshed anyway"
    (reply,) = agent.raw(b'{"v":1,"id":3,"op":"token","account":"work","min_valid":40000000}\n')
    assert reply["error"]["code"] == "bad_request"
