"""Hostile world, configuration and environment (issue 7; SECURITY.md 10, 21, 24). Endpoints that are options,
local files, scripts or shell commands are refused before anything is executed, whether they come from
config.toml or from a discovery document the server sends; an endpoint that merely contains shell syntax reaches
the browser as one argv element, never a shell. A group/world-writable config file is refused (not a warning) by
the agent itself, not only by --check-config. (XDG_RUNTIME_DIR unset, 0755 or another user's:
test_errors.py::test_runtime_dir_must_be_set_and_private and ::test_files_owned_by_someone_else_are_refused.)
"""
import json
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from conftest import CLIENT_ID, read_replies, render_config, run_binary, short_tmpdir, wait_for
import pytest

pytestmark = pytest.mark.release  # also run against the installed package (scripts/test)


def hostile_endpoints(marker: Path) -> dict[str, str]:
    return {
        "option": "--help",
        "option with a URL": "--new-window=https://login.example.test/",
        "local file": "file:///etc/passwd",
        "script": "javascript:alert(1)",
        "data": "data:text/html,<script>alert(1)</script>",
        "command substitution": f"https://login.example.test/$(touch {marker})",
        "backticks": f"https://login.example.test/`touch {marker}`",
        "plain http to another host": "http://login.example.test/authorize",
        "localhost": "http://localhost:8080/authorize",
        "user info": "https://evil@login.example.test/authorize",
    }


def test_hostile_endpoints_in_the_config_are_refused(make_agent, bus_without_keyring, auth_server):
    """Refused by --check-config (exit 78) and by the running agent, which serves config_error naming the key (it
    never exits on a bad file: under socket activation that looped on restarts) and never starts a browser."""
    marker = Path(f"/tmp/pwn-{uuid.uuid4().hex}")
    for index, (name, value) in enumerate(hostile_endpoints(marker).items()):
        for key in ("authorization_endpoint", "issuer", "token_endpoint"):
            account = {"issuer": auth_server.issuer, "client_id": CLIENT_ID, key: value}
            agent = make_agent(config_text=render_config({"work": account}), bus=bus_without_keyring, start=False)
            result = run_binary("auth-agent", ["--check-config"], agent.env, timeout=30)
            assert result.returncode == 78, (name, key, result.returncode, result.stderr)
            assert f"'{key}'" in result.stderr and "config.toml:" in result.stderr, (name, result.stderr)
            if index == 0:
                agent.start(wait=False)
                wait_for(lambda: agent.socket_path.exists() or agent.proc.poll() is not None, 20, "the socket")
                for args in (["status"], ["login", "work"], ["token", "work", "--interactive"]):
                    refused = agent.authctl(*args, timeout=20)
                    assert refused.returncode == 10, (name, key, args, refused.returncode, refused.stderr)
                    assert f"'{key}'" in refused.stderr and "config.toml:" in refused.stderr, (name, refused.stderr)
                agent.stop()
            assert agent.browser_runs() == 0
    assert not marker.exists(), "a command in an endpoint was executed"


class DiscoveryServer:
    """A hostile authorization server: its discovery document names `authorization_endpoint` as given."""

    def __init__(self, authorization_endpoint: str):
        outer = self
        self.hits = 0

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                outer.hits += 1
                issuer = f"http://127.0.0.1:{outer.server.server_address[1]}/o"
                doc = {"issuer": issuer, "authorization_endpoint": outer.endpoint,
                       "token_endpoint": issuer + "/token/", "response_types_supported": ["code"],
                       "code_challenge_methods_supported": ["S256"]}
                body = json.dumps(doc).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.endpoint = authorization_endpoint
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def issuer(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/o"

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


def test_hostile_endpoints_from_discovery_are_refused(make_agent, keyring):
    marker = Path(f"/tmp/pwn-{uuid.uuid4().hex}")
    discovery = DiscoveryServer("about:blank")
    try:
        account = {"issuer": discovery.issuer, "client_id": CLIENT_ID, "scopes": ["email"], "login_timeout": 10}
        agent = make_agent(config_text=render_config({"work": account}))
        for name, value in hostile_endpoints(marker).items():
            discovery.endpoint = value
            hits = discovery.hits
            agent.stop()  # a fresh agent: no cached metadata
            agent.start()
            result = agent.authctl("login", "work", timeout=60)
            assert discovery.hits > hits, f"{name}: the discovery document was not fetched"
            assert result.returncode == 6, (name, result.returncode, result.stderr)
            assert agent.account_status("work").get("login_pending") is False
            assert agent.browser_runs() == 0, f"{name}: the browser was started"
            assert "'authorization_endpoint'" in result.stderr, (name, result.stderr)
    finally:
        discovery.stop()
    assert not marker.exists(), "a command in an endpoint was executed"


def test_shell_syntax_in_a_valid_endpoint_reaches_the_browser_as_one_argument(make_agent, keyring, auth_server):
    """`$(...)` without spaces is a legal https path: the agent passes the URL with execve as the browser's only
    argument, so no shell ever sees it."""
    marker = Path(f"/tmp/pwn-{uuid.uuid4().hex}")
    dump = short_tmpdir("aa-argv-") / "proc.txt"
    endpoint = f"https://127.0.0.1:9/authorize/$(touch$IFS{marker})"
    agent = make_agent(work={"authorization_endpoint": endpoint}, browser_mode="none",
                       env={"FAKE_BROWSER_PROC_DUMP": str(dump)})
    s = agent.connect(timeout=30)
    try:
        s.sendall(b'{"v":1,"id":1,"op":"login","account":"work"}\n')
        (event,) = read_replies(s, 1, 20)
        assert event["event"]["browser_opened"] is True, event
        wait_for(lambda: dump.exists() and b"== environ" in dump.read_bytes(), 10, "the browser to record its argv")
    finally:
        s.close()
    # The browser (the wrapper exec'd python: [python, fake_browser.py, URL]) got the URL verbatim, as one argument.
    args = [line for line in dump.read_bytes().split(b"== environ")[0].decode().splitlines()[1:] if line]
    assert len(args) == 3 and args[1].endswith("fake_browser.py"), args
    assert args[2].startswith(endpoint + "?"), args
    assert not marker.exists(), "the endpoint's shell syntax was executed"


def test_world_writable_config_is_never_used(make_agent, bus_without_keyring):
    """A config file others may write could point an account at their server: it is refused, by --check-config
    (exit 78) and by the running agent, which serves config_error until the mode is fixed and never reads it."""
    agent = make_agent(bus=bus_without_keyring, start=False)
    for mode in (0o666, 0o620, 0o602):
        agent.config_path.chmod(mode)
        result = run_binary("auth-agent", ["--check-config"], agent.env, timeout=30)
        assert result.returncode == 78, (oct(mode), result.returncode, result.stderr)
        assert "writable by group or others" in result.stderr and "chmod go-w" in result.stderr
    agent.config_path.chmod(0o666)
    agent.start(wait=False)
    wait_for(lambda: agent.socket_path.exists() or agent.proc.poll() is not None, 20, "the agent's socket")
    status = agent.authctl("status", timeout=10)
    assert status.returncode == 10, (status.returncode, status.stderr)
    assert "writable by group or others" in status.stderr and "chmod go-w" in status.stderr
    token = agent.authctl("token", "work", timeout=10)
    assert token.returncode == 10, (token.returncode, token.stderr)
    agent.config_path.chmod(0o600)
    assert agent.authctl("status", timeout=10).returncode == 0, "fixed: the next request reads the file"
    agent.stop()
    agent.config_path.chmod(0o644)  # readable by others is allowed (it holds no secret unless client_secret)
    result = run_binary("auth-agent", ["--check-config"], agent.env, timeout=30)
    assert result.returncode == 0, result.stderr
