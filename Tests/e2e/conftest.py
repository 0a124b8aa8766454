"""End-to-end fixtures: the real auth-agent and authctl binaries, a real GNOME keyring on a private D-Bus bus,
the Django OAuth Toolkit test server and the scripted browser (Tests/Fixtures/README.md).

Run:  AUTH_AGENT_BIN_DIR=$(swift build --show-bin-path) .venv/bin/python -m pytest Tests/e2e -q

Everything is started here and torn down by pid; nothing outside the test's temp dirs is touched. A component
that cannot start fails the test (never a skip). Every wait is bounded.
"""
from __future__ import annotations

import contextlib
import ctypes
import json
import os
import shutil
import signal
import socket
import sqlite3
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import requests

import keyring_unlock

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "Tests" / "Fixtures"
SERVE_SH = FIXTURES / "authserver" / "serve.sh"
FAKE_BROWSER = FIXTURES / "browser" / "fake-browser"
# The fixtures' venv (serve.sh wants the directory, fake-browser its python): by default the venv that runs pytest
# (scripts/test: .venv/bin/python -m pytest); AUTH_AGENT_TEST_VENV overrides it.
VENV = Path(os.environ.get("AUTH_AGENT_TEST_VENV") or sys.prefix).absolute()
VENV_PYTHON = VENV / "bin" / "python"
CLIENT_ID = "auth-agent-test"
KEYRING_PASSWORD = "e2e-keyring-password"
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# Make this process a child subreaper: daemons that double-fork (dbus-daemon --fork, gnome-keyring-daemon
# --daemonize) are re-parented to us instead of init, so we can reap them and check they are really gone.
try:
    ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
except Exception:  # pragma: no cover - not fatal, only makes "gone" checks weaker
    pass


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "release: the subset run against the release build and the installed package (scripts/test)")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Makes the call phase's report visible to fixtures (request.node.rep_call), to keep a failed test's files."""
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)


_TOKEN_SHAPE = __import__("re").compile(r"^[A-Za-z0-9._~+=-]{16,}$")
# The fields of a keyring secret that are not secret: `valid_until=N`, `warned_at=M` (StoredCredential.seal).
_STORED_ATTRIBUTE = __import__("re").compile(r"^[a-z_]+=\d+$")


def secret_shaped(value) -> bool:
    """A token (16 or more token characters), or a keyring item's secret as the agent writes it: fields separated by
    \\x01 (the DPoP key before the refresh token, `valid_until=`; StoredCredential.seal), which hold a refresh token
    and maybe a private key, and which the token shape alone does not match."""
    return isinstance(value, str) and (bool(_TOKEN_SHAPE.match(value)) or "\x01" in value)


def _withheld(value) -> str:
    if not isinstance(value, str):
        return "None" if value is None else f"<{type(value).__name__}>"
    if "\x01" in value:
        return f"<keyring secret: {value.count(chr(1))} separators, {len(value)} chars>"
    return f"<{'token-shaped ' if secret_shaped(value) else ''}string of {len(value)} chars>"


def pytest_assertrepr_compare(config, op, left, right):
    """A failed comparison in which either side is secret-shaped (a token, or a keyring secret: `assert new != old`,
    `assert key_ref(stored) == key` with None on the left) says how the two compare, never what they are: test
    output must not carry tokens, even the test server's, nor a DPoP key. It replaces the whole explanation of that
    comparison, so the `where ... = f(<argument>)` lines that would quote an argument are gone too. What it cannot
    reach is an assert that is not a comparison (`assert stored and stored.startswith(...)`): tests compute a ref or a
    bool from a secret first and assert on that (test_dpop.py's key_ref/token_ref)."""
    if secret_shaped(left) or secret_shaped(right):
        # (Called for each comparison an assert shows, the ones that held too, so it says what is, not "failed".)
        relation = f": they are {'equal' if left == right else 'different'}" if op in ("==", "!=") else ""
        return [f"{_withheld(left)} {op} {_withheld(right)}{relation} (values withheld from test output)"]
    return None


def pytest_sessionfinish(session, exitstatus):
    """Reaps orphans re-parented to us (e.g. a browser started by an agent a test killed)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


# ----------------------------------------------------------------------------------------------------------------
# Small helpers


def bin_dir() -> Path:
    value = os.environ.get("AUTH_AGENT_BIN_DIR")
    if not value:
        pytest.fail("AUTH_AGENT_BIN_DIR is not set (the directory with the built auth-agent and authctl; "
                    "e.g. AUTH_AGENT_BIN_DIR=$(swift build --show-bin-path))", pytrace=False)
    path = Path(value)
    for name in ("auth-agent", "authctl"):
        if not os.access(path / name, os.X_OK):
            pytest.fail(f"{path / name} is missing or not executable (run swift build)", pytrace=False)
    return path


# The moments test_hostile.py and test_dpop.py kill the agent in a rotating refresh: the fault proxy's mode for each.
KILL_MOMENTS = {"before_request": "hang_before", "after_rotation": "hang_after", "after_response": "after_response"}


def kill9_during_refresh(agent, proxy, when: str) -> bool:
    """Starts `authctl token work --refresh` through `proxy`, kills the agent with SIGKILL at `when` (before the
    request reaches the server, after the server rotated the token but before its answer, after the answer), and
    lets the proxy pass again. Returns whether the client printed anything; what it printed (a token) is remembered
    as a secret, never returned, so no assert message can show it."""
    proxy.set(KILL_MOMENTS[when])
    client = agent.authctl_popen("token", "work", "--refresh")
    assert proxy.reached.wait(20), "the refresh never reached the proxy"
    agent.kill9()
    out, _ = client.communicate(timeout=15)
    agent.remember(out)
    proxy.set("pass")
    return bool(out.strip())


def wait_for(predicate, timeout: float, what: str, interval: float = 0.05):
    """Polls `predicate` until it returns a truthy value (returned) or `timeout` seconds pass (AssertionError)."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        last = predicate()
        if last:
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what} (last value: {last!r})")
        time.sleep(interval)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def short_tmpdir(prefix: str) -> Path:
    """A private temp dir with a short path (Unix socket paths are limited to 107 bytes)."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    path.chmod(0o700)
    return path


def pid_alive(pid: int) -> bool:
    """True while `pid` exists and is not a zombie (reaping it if it is our child)."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    except ChildProcessError:
        pass
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        return state not in ("Z", "X")
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def kill_pid(pid: int, timeout: float = 5.0):
    """SIGTERM, then SIGKILL after `timeout`; returns once the process is gone."""
    if not pid_alive(pid):
        return
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while pid_alive(pid):
        if time.monotonic() > deadline:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                return
            wait_for(lambda: not pid_alive(pid), 5, f"pid {pid} to die after SIGKILL")
            return
        time.sleep(0.02)


def stop_popen(proc: subprocess.Popen, timeout: float = 10.0):
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


# ----------------------------------------------------------------------------------------------------------------
# Authorization server


class AuthServer:
    """One instance of Tests/Fixtures/authserver (serve.sh) in its own state dir."""

    def __init__(self, state: Path, lifetime: int = 3600, extra_env: dict | None = None):
        self.state = Path(state)
        self.lifetime = lifetime
        self.extra_env = extra_env or {}
        self.port: int | None = None
        self.proc: subprocess.Popen | None = None
        self._log = None

    @property
    def issuer(self) -> str:
        return f"http://127.0.0.1:{self.port}/o"

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, port: int | None = None, timeout: float = 60):
        self.state.mkdir(parents=True, exist_ok=True)
        # DPoP and PAR are off unless a test asks for them (extra_env={"AS_DPOP": "optional", "AS_PAR": "on"}, ...):
        # the fixture advertises both by default, and the tests written before them expect plain Bearer sign-ins.
        env = {**os.environ, "AS_ACCESS_TOKEN_LIFETIME": str(self.lifetime), "AS_DPOP": "off", "AS_PAR": "off",
               **self.extra_env}
        for var in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
            env.pop(var, None)
        args = [str(SERVE_SH), str(VENV), str(self.state)] + ([str(port)] if port else [])
        self._log = open(self.state / "serve.stderr", "ab")
        self.proc = subprocess.Popen(args, env=env, stdin=subprocess.DEVNULL, stdout=self._log, stderr=self._log,
                                     start_new_session=True)
        ready = self.state / "ready"

        def is_ready():
            if self.proc.poll() is not None:
                raise AssertionError(f"the auth server exited with {self.proc.returncode}: "
                                     f"{(self.state / 'serve.stderr').read_text(errors='replace')[-2000:]}")
            return ready.exists()

        wait_for(is_ready, timeout, "the auth server's ready file")
        self.port = int((self.state / "port").read_text().strip())
        assert (self.state / "issuer").read_text().strip() == self.issuer
        return self

    def stop(self):
        if self.proc is not None:
            stop_popen(self.proc)
            self.proc = None
        if self._log:
            self._log.close()
            self._log = None

    def restart(self):
        port = self.port
        self.stop()
        # The port was in use a moment ago: retry briefly if the kernel has not released it yet.
        deadline = time.monotonic() + 15
        while True:
            try:
                return self.start(port=port)
            except AssertionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.3)

    # -- observation

    def requests_log(self) -> list[str]:
        path = self.state / "requests.log"
        return path.read_text().splitlines() if path.exists() else []

    def token_posts(self) -> int:
        return sum(1 for line in self.requests_log() if line.startswith("POST /o/token/ "))

    # The server-side helpers take a token, or a keyring item's secret, whose token they use (stored_token).

    def introspect(self, token: str) -> dict:
        r = requests.post(f"{self.base}/o/introspect/", data={"token": stored_token(token)},
                          auth=("introspector", "introspector-secret"), timeout=10,
                          proxies={"http": None, "https": None})
        assert r.status_code == 200, f"introspection answered HTTP {r.status_code}: {r.text[:200]}"
        return r.json()

    def issued_secrets(self) -> set[str]:
        """Every access token, refresh token and authorization code this server ever issued (its sqlite DB)."""
        db = self.state / "db.sqlite3"
        if not db.exists():
            return set()
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)) as conn:
            found = set()
            for table, column in (("oauth2_provider_accesstoken", "token"), ("oauth2_provider_refreshtoken", "token"),
                                  ("oauth2_provider_grant", "code")):
                found.update(row[0] for row in conn.execute(f"SELECT {column} FROM {table}") if row[0])
            return found

    def refresh_token_works(self, token: str) -> bool:
        """Spends `token` at the token endpoint (grant_type=refresh_token); True if the server accepted it."""
        r = requests.post(f"{self.base}/o/token/",
                          data={"grant_type": "refresh_token", "refresh_token": stored_token(token),
                                "client_id": CLIENT_ID},
                          timeout=10, proxies={"http": None, "https": None})
        return r.status_code == 200

    def revoke(self, token: str, hint: str = "refresh_token") -> int:
        r = requests.post(f"{self.base}/o/revoke_token/",
                          data={"token": stored_token(token), "token_type_hint": hint, "client_id": CLIENT_ID},
                          timeout=10, proxies={"http": None, "https": None})
        return r.status_code


@pytest.fixture(scope="session")
def auth_server(tmp_path_factory):
    server = AuthServer(tmp_path_factory.mktemp("authserver"))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def private_auth_server(tmp_path):
    """A separate auth server for tests that stop and restart it."""
    server = AuthServer(tmp_path / "authserver")
    server.start()
    yield server
    server.stop()


@pytest.fixture
def iss_auth_server(tmp_path):
    """A separate auth server that sends RFC 9207 `iss` in authorization responses (AS_AUTHZ_RESPONSE_ISS=1)."""
    server = AuthServer(tmp_path / "authserver-iss", extra_env={"AS_AUTHZ_RESPONSE_ISS": "1"})
    server.start()
    yield server
    server.stop()


# ----------------------------------------------------------------------------------------------------------------
# Private D-Bus session bus + gnome-keyring

# A session bus with no <servicedir> by default: nothing is ever activated, so no second keyring daemon can start
# with the real HOME, and a bus without gnome-keyring really has no Secret Service. The D-Bus tests add a servicedir
# that holds only auth-agent's activation file.
BUS_CONFIG = """<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  <keep_umask/>
  <listen>unix:dir={dir}</listen>
  <auth>EXTERNAL</auth>{extra}
  <policy context="default">
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow own="*"/>{policy}
  </policy>
</busconfig>
"""


class Keyring:
    """A private session bus, optionally with a real gnome-keyring-daemon whose `login` collection is unlocked."""

    def __init__(self, base: Path, with_keyring: bool = True, service_dir: Path | None = None,
                 allow_all_users: bool = False):
        self.base = base
        self.with_keyring = with_keyring
        self.service_dir = service_dir
        self.allow_all_users = allow_all_users
        self.address: str | None = None
        self.bus_pid: int | None = None
        self.daemon_pid: int | None = None
        self.home = base / "home"
        self.runtime = base / "run"

    @property
    def env(self) -> dict:
        return {"DBUS_SESSION_BUS_ADDRESS": self.address}

    def _tool_env(self) -> dict:
        return {"PATH": SYSTEM_PATH, "HOME": str(self.home), "XDG_RUNTIME_DIR": str(self.runtime),
                "DBUS_SESSION_BUS_ADDRESS": self.address, "LANG": "C.UTF-8"}

    def start(self):
        (self.base / "bus").mkdir(mode=0o700)
        config = self.base / "session.conf"
        extra = f"\n  <servicedir>{self.service_dir}</servicedir>" if self.service_dir else ""
        policy = '\n    <allow user="*"/>' if self.allow_all_users else ""
        config.write_text(BUS_CONFIG.format(dir=self.base / "bus", extra=extra, policy=policy))
        out = subprocess.run(["dbus-daemon", f"--config-file={config}", "--fork", "--nosyslog",
                              "--print-address=1", "--print-pid=1"],
                             env={"PATH": SYSTEM_PATH}, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                             timeout=20)
        assert out.returncode == 0, f"dbus-daemon failed ({out.returncode}): {out.stderr}"
        lines = out.stdout.split()
        self.address, self.bus_pid = lines[0], int(lines[1])
        if self.with_keyring:
            self.start_keyring()
        return self

    def start_keyring(self):
        """A gnome-keyring-daemon on this bus with its `login` collection unlocked (also later, on a bus that
        started without one)."""
        self.home.mkdir(mode=0o700, exist_ok=True)
        self.runtime.mkdir(mode=0o700, exist_ok=True)
        out = subprocess.run(["gnome-keyring-daemon", "--unlock", "--components=secrets", "--daemonize"],
                             input=KEYRING_PASSWORD, env=self._tool_env(), capture_output=True, text=True,
                             timeout=20)
        assert out.returncode == 0, f"gnome-keyring-daemon failed ({out.returncode}): {out.stderr}"
        # --daemonize returns before the daemon owns its name: wait for it.
        wait_for(lambda: self._dbus("org.freedesktop.DBus", "/org/freedesktop/DBus",
                                    "org.freedesktop.DBus.NameHasOwner", "org.freedesktop.secrets") == "(true,)",
                 10, "org.freedesktop.secrets on the private bus")
        pid = self._dbus("org.freedesktop.DBus", "/org/freedesktop/DBus",
                         "org.freedesktop.DBus.GetConnectionUnixProcessID", "org.freedesktop.secrets")
        self.daemon_pid = int(pid.strip("(),").split()[-1])
        assert self.collection_locked() is False
        return self

    def stop(self):
        if self.daemon_pid:
            kill_pid(self.daemon_pid)
        if self.bus_pid:
            kill_pid(self.bus_pid)
        for pid in (self.daemon_pid, self.bus_pid):
            if pid:
                assert not pid_alive(pid), f"pid {pid} survived the keyring teardown"

    # -- tools

    def _dbus(self, dest, path, method, *args, check=True) -> str:
        out = subprocess.run(["gdbus", "call", "--session", "--dest", dest, "--object-path", path,
                              "--method", method, "--", *args],
                             env=self._tool_env(), capture_output=True, text=True, timeout=15)
        if check:
            assert out.returncode == 0, f"gdbus {method} failed: {out.stderr.strip()}"
        return out.stdout.strip()

    def secret_tool_lookup(self, account: str, issuer: str, client_id: str = CLIENT_ID) -> str | None:
        out = subprocess.run(["secret-tool", "lookup", "account", account, "issuer", issuer, "client_id", client_id],
                             env=self._tool_env(), capture_output=True, text=True, timeout=15)
        return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else None

    def secret_tool_count(self, account: str) -> int:
        out = subprocess.run(["secret-tool", "search", "--all", "account", account],
                             env=self._tool_env(), capture_output=True, text=True, timeout=15)
        # One "[/org/freedesktop/secrets/collection/login/N]" header per item (printed on stdout or stderr).
        return sum(1 for line in (out.stdout + out.stderr).splitlines() if line.startswith("[/"))

    def secret_tool_attributes(self, account: str) -> list[dict]:
        out = subprocess.run(["secret-tool", "search", "--all", "account", account],
                             env=self._tool_env(), capture_output=True, text=True, timeout=15)
        items, current = [], None
        for line in (out.stdout + out.stderr).splitlines():
            if line.startswith("[/"):
                current = {}
                items.append(current)
            elif current is not None and " = " in line:
                key, value = line.split(" = ", 1)
                if key != "secret":
                    current[key] = value
        return items

    def collection_locked(self) -> bool:
        out = self._dbus("org.freedesktop.secrets", "/org/freedesktop/secrets/collection/login",
                         "org.freedesktop.DBus.Properties.Get", "org.freedesktop.Secret.Collection", "Locked")
        return out == "(<true>,)"

    def lock(self):
        self._dbus("org.freedesktop.secrets", "/org/freedesktop/secrets",
                   "org.freedesktop.Secret.Service.Lock", "['/org/freedesktop/secrets/collection/login']")
        assert self.collection_locked() is True, "the login collection did not lock"

    def unlock(self, password: str = KEYRING_PASSWORD):
        """Unlocks the login keyring the way the PAM module does (keyring_unlock.py)."""
        reply = keyring_unlock.unlock(str(self.runtime / "keyring" / "control"), password.encode())
        assert keyring_unlock.succeeded(reply), f"gnome-keyring refused to unlock: {reply.hex()}"
        assert self.collection_locked() is False, "the login collection is still locked"


def _private_bus(prefix: str, with_keyring: bool, **options):
    base = short_tmpdir(prefix)
    if options.get("service_dir") is True:
        options["service_dir"] = base / "services"
        options["service_dir"].mkdir(mode=0o700)
    kr = Keyring(base, with_keyring=with_keyring, **options)
    try:
        kr.start()
        yield kr
    finally:
        kr.stop()
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def keyring():
    """A private session bus with a real, unlocked gnome-keyring."""
    yield from _private_bus("aa-kr-", with_keyring=True)


@pytest.fixture
def bus_without_keyring():
    """A private session bus with no Secret Service and no service activation."""
    yield from _private_bus("aa-bus-", with_keyring=False)


# ----------------------------------------------------------------------------------------------------------------
# auth-agent + authctl


def stored_token(secret: str | None) -> str | None:
    """The token in a keyring item's secret as the agent writes it (StoredCredential): what follows its last \\x01,
    after the sign-in's DPoP key and ID token claims when it has them. A bare refresh token is itself."""
    return secret.rsplit("\x01", 1)[-1] if secret else secret


def split_stored(payload: str | None) -> tuple[str | None, int | None]:
    """A keyring item's secret as the agent writes it: the credential, and the sign-in's end (Unix seconds) when the
    item carries one (`\\x01valid_until=N\\x01`, then maybe `\\x01warned_at=M\\x01`, before the credential;
    StoredCredential.seal)."""
    if payload is None or not payload.startswith("\x01valid_until="):
        return payload, None
    header, _, rest = payload[1:].partition("\x01")
    if rest.startswith("\x01warned_at="):
        rest = rest[1:].partition("\x01")[2]
    return rest, int(header.removeprefix("valid_until="))


def toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(value)


def default_account(issuer: str, **extra) -> dict:
    account = {"issuer": issuer, "client_id": CLIENT_ID, "scopes": ["openid", "email", "offline_access"],
               "login_timeout": 30}
    account.update(extra)
    return account


def render_config(accounts: dict, agent: dict | None = None) -> str:
    lines = []
    if agent:
        lines.append("[agent]")
        lines += [f"{k} = {toml_value(v)}" for k, v in agent.items()]
        lines.append("")
    for name, keys in accounts.items():
        lines.append(f"[accounts.{name}]")
        lines += [f"{k} = {toml_value(v)}" for k, v in keys.items()]
        lines.append("")
    return "\n".join(lines)


class Agent:
    """One auth-agent process with its own HOME, XDG_RUNTIME_DIR and XDG_CONFIG_HOME."""

    # Prepended to the agent's command line (the `kernel_paths` fixture runs it under no_pidfd.py).
    launcher: list[str] = []

    def __init__(self, base: Path, bus_env: dict, config_text: str, browser_mode: str = "login",
                 env_overrides: dict | None = None, args: list[str] | None = None):
        self.bins = bin_dir()
        self.base = base
        self.home = base / "home"
        self.runtime = base / "run"
        self.config_home = base / "config"
        self.config_path = self.config_home / "auth-agent" / "config.toml"
        self.stderr_path = base / "agent.stderr"
        self.browser_log = base / "browser.log"
        for d in (self.home, self.runtime, self.config_home, self.config_home / "auth-agent"):
            d.mkdir(mode=0o700, parents=True, exist_ok=True)
            d.chmod(0o700)
        self.write_config(config_text)
        self.browser_log.touch()
        self.env = {
            "PATH": SYSTEM_PATH, "HOME": str(self.home), "LANG": "C.UTF-8",
            "XDG_RUNTIME_DIR": str(self.runtime), "XDG_CONFIG_HOME": str(self.config_home),
            "BROWSER": str(FAKE_BROWSER), "FAKE_BROWSER_PYTHON": str(VENV_PYTHON),
            "FAKE_BROWSER_LOG": str(self.browser_log), "FAKE_BROWSER_MODE": browser_mode,
            **bus_env,
        }
        for key, value in (env_overrides or {}).items():
            if value is None:
                self.env.pop(key, None)
            else:
                self.env[key] = value
        self.args = args if args is not None else ["--log-level", "debug"]
        self.proc: subprocess.Popen | None = None
        self._stderr = None
        self.secrets: set[str] = set()  # token values that must never appear in the agent's log
        self.server: AuthServer | None = None

    @property
    def socket_path(self) -> Path:
        return self.runtime / "auth-agent" / "agent.sock"

    def write_config(self, text: str, mode: int = 0o600):
        self.config_path.write_text(text)
        self.config_path.chmod(mode)

    # -- process

    def start(self, wait: bool = True, timeout: float = 20):
        assert self.proc is None or self.proc.poll() is not None, "agent already running"
        self._stderr = open(self.stderr_path, "ab")
        self.proc = subprocess.Popen([*self.launcher, str(self.bins / "auth-agent"), *self.args], env=self.env,
                                     stdin=subprocess.DEVNULL, stdout=self._stderr, stderr=self._stderr,
                                     start_new_session=True)
        if wait:
            self.wait_ready(timeout)
        return self

    @contextlib.contextmanager
    def socket_activated(self, variables: tuple, env: dict | None = None):
        """The agent under a loop of systemd-socket-activate, which stands in for systemd: it holds the socket, starts
        the agent on the next connection and again after each exit (the loop says so in the agent's log). `variables`
        of the environment (plus `env`) are passed on to the agent. Yields once the socket listens; the loop is
        stopped after."""
        self.socket_path.parent.mkdir(mode=0o700)
        forwarded = " ".join(f"-E {name}" for name in variables)
        script = (f"while systemd-socket-activate -l {self.socket_path} {forwarded} {self.bins / 'auth-agent'} "
                  f"--log-level debug; do echo 'systemd-socket-activate: agent exited 0, listening again' >&2; done")
        log = open(self.stderr_path, "ab")
        manager = subprocess.Popen(["sh", "-c", script], env=dict(self.env, **(env or {})), stdin=subprocess.DEVNULL,
                                   stdout=log, stderr=log, start_new_session=True)
        try:
            wait_for(lambda: self.socket_path.exists(), 10, "systemd-socket-activate to listen")
            yield manager
        finally:
            os.killpg(manager.pid, signal.SIGTERM)
            manager.wait(timeout=15)
            log.close()

    def wait_ready(self, timeout: float = 20):
        def ready():
            if self.proc.poll() is not None:
                raise AssertionError(f"auth-agent exited with {self.proc.returncode} during start-up:\n"
                                     f"{self.log()[-3000:]}")
            if not self.socket_path.exists():
                return False
            return self.authctl("status", timeout=10, check_log=False).returncode == 0

        wait_for(ready, timeout, "auth-agent to answer `authctl status`", interval=0.1)

    def stop(self, expect_rc: int | None = 0):
        """SIGTERM; asserts a clean exit (code 0) and that the process is gone."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=5)
            raise AssertionError(f"auth-agent did not exit within 15 s of SIGTERM:\n{self.log()[-2000:]}")
        pid = self.proc.pid
        self._close_log()
        assert not pid_alive(pid)
        if expect_rc is not None:
            assert rc == expect_rc, f"auth-agent exited with {rc} after SIGTERM:\n{self.log()[-2000:]}"
        return rc

    def kill9(self):
        self.proc.kill()
        self.proc.wait(timeout=10)
        self._close_log()

    def restart(self):
        self.stop()
        return self.start()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _close_log(self):
        if self._stderr:
            self._stderr.close()
            self._stderr = None

    def cleanup(self):
        if self.proc is not None and self.proc.poll() is None:
            stop_popen(self.proc)
        self._close_log()

    # -- observation

    def log(self) -> str:
        return self.stderr_path.read_text(errors="replace") if self.stderr_path.exists() else ""

    def browser_runs(self) -> int:
        return sum(1 for line in self.browser_log.read_text().splitlines() if line.startswith("START "))

    def remember(self, *secrets: str | None):
        """Values the agent's log must never hold (checked at teardown). A keyring secret counts field by field too:
        its refresh token and its DPoP key are what a log line would show, never the whole \\x01-joined secret."""
        for secret in (s.strip() for s in secrets if s and s.strip()):
            self.secrets.add(secret)
            if "\x01" in secret:
                self.secrets.update(field for field in secret.split("\x01")
                                    if _TOKEN_SHAPE.match(field) and not _STORED_ATTRIBUTE.match(field))

    def assert_no_secrets_logged(self):
        log = self.log()
        for secret in self.secrets:
            assert secret not in log, "a token value appears in the agent's stderr log"

    # -- clients

    def authctl(self, *args, input: str | None = None, timeout: float = 60, env: dict | None = None,
                check_log: bool = True) -> subprocess.CompletedProcess:
        full_env = dict(self.env)
        full_env.update(env or {})
        result = subprocess.run([str(self.bins / "authctl"), *args], env=full_env, input=input,
                                capture_output=True, text=True, timeout=timeout,
                                stdin=None if input is not None else subprocess.DEVNULL)
        if check_log and args and args[0] == "token" and result.returncode == 0:
            out = result.stdout.strip()
            if "--json" in args:
                data = json.loads(out)
                self.remember(data.get("access_token"), data.get("id_token"))
            else:
                self.remember(out.removeprefix("Authorization: Bearer "))
        return result

    def authctl_popen(self, *args, env: dict | None = None) -> subprocess.Popen:
        full_env = dict(self.env)
        full_env.update(env or {})
        return subprocess.Popen([str(self.bins / "authctl"), *args], env=full_env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def token(self, account: str = "work", *extra) -> str:
        result = self.authctl("token", account, *extra)
        assert result.returncode == 0, f"authctl token failed ({result.returncode}): {result.stderr}"
        return result.stdout.strip()

    def status_json(self) -> dict:
        result = self.authctl("status", "--json", timeout=20)
        assert result.returncode == 0, f"authctl status --json failed ({result.returncode}): {result.stderr}"
        return json.loads(result.stdout)

    def account_status(self, name: str = "work") -> dict:
        return next(a for a in self.status_json()["accounts"] if a["name"] == name)

    def login(self, account: str = "work") -> subprocess.CompletedProcess:
        result = self.authctl("login", account, timeout=60)
        assert result.returncode == 0, f"authctl login failed ({result.returncode}):\n{result.stderr}"
        return result

    def connect(self, timeout: float = 10) -> socket.socket:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(timeout)
        s.connect(str(self.socket_path))
        return s

    def raw(self, data: bytes, replies: int = 1, timeout: float = 10) -> list[dict]:
        """Sends `data` on a fresh connection; reads reply lines until `replies` arrived, EOF or `timeout`."""
        with self.connect(timeout) as s:
            s.sendall(data)
            return read_replies(s, replies, timeout)


def read_replies(s: socket.socket, replies: int, timeout: float) -> list[dict]:
    buffer, out = b"", []
    deadline = time.monotonic() + timeout
    while len(out) < replies:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        s.settimeout(remaining)
        try:
            chunk = s.recv(65536)
        except socket.timeout:
            break
        except ConnectionResetError:
            break
        if not chunk:
            break
        buffer += chunk
        while b"\n" in buffer and len(out) < replies:
            line, buffer = buffer.split(b"\n", 1)
            out.append(json.loads(line))
    return out


def assert_no_reply(s: socket.socket, what: str, wait: float = 0.5):
    """Fails if the agent sends anything on `s` within `wait` seconds (e.g. a sign-in that ended on a forged response)."""
    s.settimeout(wait)
    try:
        early = s.recv(4096)
    except socket.timeout:
        return
    raise AssertionError(f"{what}: {early!r}")


def connection_closed(s: socket.socket, timeout: float = 5) -> bool:
    """True if the peer closes the connection (EOF or reset) within `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        s.settimeout(max(0.05, deadline - time.monotonic()))
        try:
            if s.recv(65536) == b"":
                return True
        except socket.timeout:
            return False
        except (ConnectionResetError, BrokenPipeError):
            return True
    return False


@pytest.fixture
def make_agent(request, tmp_path_factory):
    """Factory: make_agent(accounts=None, agent=None, config_text=None, browser_mode="login", env=None,
    bus=<the `keyring` fixture> (False: no bus at all), server=<auth_server>, start=True) -> Agent. `accounts` defaults to {"work": default_account(...)}
    on the shared auth server; extra keys can be merged with make_agent(work={...})."""
    agents: list[Agent] = []

    def factory(accounts: dict | None = None, agent: dict | None = None, config_text: str | None = None,
                browser_mode: str = "login", env: dict | None = None, bus=None, server=None, start: bool = True,
                work: dict | None = None, args: list[str] | None = None) -> Agent:
        if bus is None:
            bus = request.getfixturevalue("keyring")
        if server is None:
            server = request.getfixturevalue("auth_server")
        if config_text is None:
            if accounts is None:
                accounts = {"work": default_account(server.issuer, **(work or {}))}
            config_text = render_config(accounts, agent)
        bin_dir()  # fail before creating anything
        base = short_tmpdir("aa-ag-")
        instance = Agent(base, bus.env if bus else {}, config_text, browser_mode=browser_mode, env_overrides=env,
                         args=args)
        instance.server = server
        agents.append(instance)
        if start:
            instance.start()
        return instance

    yield factory
    errors = []
    for instance in agents:
        instance.cleanup()
        try:
            # Everything the test saw, plus every token and code the auth server ever issued.
            if instance.server is not None:
                instance.remember(*instance.server.issued_secrets())
            instance.assert_no_secrets_logged()
        except AssertionError as e:
            errors.append(f"{instance.stderr_path}: {e}")
    report = getattr(request.node, "rep_call", None)
    failed = errors or (report is not None and report.failed)
    for instance in agents:
        if failed:
            # Keep the logs and config (not the sockets) where pytest rotates its temp dirs.
            kept = tmp_path_factory.mktemp("failed-agent")
            for name in ("agent.stderr", "browser.log"):
                if (instance.base / name).exists():
                    shutil.copy(instance.base / name, kept / name)
            if instance.config_path.exists():
                shutil.copy(instance.config_path, kept / "config.toml")
            print(f"agent log kept: {kept / 'agent.stderr'}")
        shutil.rmtree(instance.base, ignore_errors=True)
    assert not errors, "token canary: " + "; ".join(errors)


def stop_process(pid: int):
    """SIGSTOP, then waits until every thread of `pid` is stopped (the signal is delivered asynchronously: a thread
    running on another CPU may still read a socket for a moment after kill() returns)."""
    os.kill(pid, signal.SIGSTOP)

    def all_stopped():
        for task in Path(f"/proc/{pid}/task").iterdir():
            try:
                state = (task / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            if state not in ("T", "t"):
                return False
        return True

    wait_for(all_stopped, 10, f"every thread of {pid} to stop")


NO_PIDFD = Path(__file__).parent / "no_pidfd.py"


@pytest.fixture(params=["pidfd", "no_pidfd"])
def kernel_paths(request, monkeypatch):
    """Runs a test twice: on this kernel, and with the agent under no_pidfd.py's seccomp filter, which makes
    SO_PEERPIDFD fail as kernels before 6.5 do, so the identity code those kernels take runs here too."""
    if request.param == "no_pidfd":
        probe = subprocess.run(["/usr/bin/python3", str(NO_PIDFD), "/usr/bin/true"], capture_output=True, text=True,
                               timeout=30)
        assert probe.returncode == 0, \
            f"cannot force the old-kernel path (python3-seccomp, see scripts/setup): {probe.stderr[-500:]}"
        monkeypatch.setattr(Agent, "launcher", ["/usr/bin/python3", str(NO_PIDFD)])
    return request.param


@pytest.fixture
def agent(make_agent):
    """The default agent: account `work` on the shared auth server, real keyring, fake-browser mode `login`."""
    return make_agent()


@pytest.fixture
def signed_in_agent(agent, keyring, auth_server):
    agent.login("work")
    rt = keyring.secret_tool_lookup("work", auth_server.issuer)
    assert rt, "no refresh token in the keyring after login"
    agent.remember(rt)
    return agent


def read_until(stream, needle: str, timeout: float) -> str:
    """Reads a Popen text pipe (unbuffered via its fd) until `needle` appears; returns what was read."""
    import select

    fd = stream.fileno()
    text = ""
    deadline = time.monotonic() + timeout
    while needle not in text:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise AssertionError(f"timed out after {timeout} s waiting for {needle!r}; got: {text!r}")
        ready, _, _ = select.select([fd], [], [], remaining)
        if ready:
            chunk = os.read(fd, 65536)
            if not chunk:
                raise AssertionError(f"stream closed before {needle!r} appeared; got: {text!r}")
            text += chunk.decode(errors="replace")
    return text


def run_binary(name: str, args: list[str], env: dict, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run([str(bin_dir() / name), *args], env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=timeout)


def file_mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)
