"""Integrations with the real programs: git (credential helper protocol, driven through real `git` against a local
HTTP server that checks the Basic credential at the auth server's introspection endpoint) and kubectl (the
client.authentication.k8s.io/v1 ExecCredential, checked against the schema and, where a kubectl that speaks v1 is
installed, through real `kubectl` against a local API stand-in that checks the bearer token)."""
from __future__ import annotations

import base64
import contextlib
import http.server
import json
import re
import shutil
import ssl
import subprocess
import threading
import time
from datetime import datetime, timezone

import pytest

from conftest import CLIENT_ID, SYSTEM_PATH, bin_dir

pytestmark = pytest.mark.release  # also run against the installed package (scripts/test)

SHA = "0123456789abcdef0123456789abcdef01234567"


# ----------------------------------------------------------------------------------------------------------------
# A tiny HTTP server: git's dumb protocol for ls-remote, and a kube-apiserver stand-in for `kubectl get --raw`.


class CheckingServer:
    """Serves on 127.0.0.1:0 in a thread (over TLS with `tls=(certfile, keyfile)`). `check(authorization) -> bool`
    decides each request; every request is recorded as (method, path, authorization header or None)."""

    def __init__(self, check, routes: dict[str, tuple[str, bytes]], challenge: str, tls: tuple | None = None):
        self.check = check
        self.routes = routes
        self.challenge = challenge
        self.seen: list[tuple[str, str, str | None]] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def do_GET(self):
                auth = self.headers.get("Authorization")
                outer.seen.append(("GET", self.path, auth))
                path = self.path.split("?", 1)[0]
                if not auth or not outer.check(auth):
                    self._send(401, "text/plain", b"unauthorized\n", {"WWW-Authenticate": outer.challenge})
                elif path in outer.routes:
                    content_type, body = outer.routes[path]
                    self._send(200, content_type, body)
                else:
                    self._send(404, "text/plain", b"not found\n")

            def _send(self, code, content_type, body, headers=None):
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.scheme = "http"
        if tls:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*tls)
            self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
            self.scheme = "https"
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def base(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    def authorizations(self) -> list[str]:
        return [auth for _, _, auth in self.seen if auth]

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=10)


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def parse_basic(header: str) -> tuple[str, str] | None:
    if not header.startswith("Basic "):
        return None
    user, _, password = base64.b64decode(header[6:]).decode().partition(":")
    return user, password


@contextlib.contextmanager
def git_server(auth_server, username: str = "oauth2"):
    """A git 'repository' at /repo.git (dumb HTTP: info/refs and HEAD) that wants Basic username:<active token>."""
    def check(header):
        creds = parse_basic(header)
        return bool(creds) and creds[0] == username and auth_server.introspect(creds[1]).get("active") is True

    routes = {"/repo.git/info/refs": ("text/plain", f"{SHA}\trefs/heads/main\n".encode()),
              "/repo.git/HEAD": ("text/plain", b"ref: refs/heads/main\n")}
    with CheckingServer(check, routes, 'Basic realm="test git"') as server:
        yield server


def git_env(agent) -> dict:
    """The agent's session environment, with no git configuration but ours and no way to prompt."""
    return dict(agent.env, GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL="/dev/null", GIT_TERMINAL_PROMPT="0",
                GIT_ASKPASS="", SSH_ASKPASS="")


def helper(*extra: str) -> str:
    return f"!'{bin_dir() / 'authctl'}' git-credential --account work" + "".join(f" {e}" for e in extra)


def run_git(agent, *args: str) -> subprocess.CompletedProcess:
    assert shutil.which("git", path=SYSTEM_PATH), "git is not installed (scripts/setup installs it)"
    return subprocess.run(["git", *args], env=git_env(agent), cwd=agent.home, capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)


def credential_get(agent, *extra: str, input: str = "protocol=https\nhost=git.example.com\npath=repo.git\n\n"):
    return agent.authctl("git-credential", "--account", "work", *extra, "get", input=input)


# ----------------------------------------------------------------------------------------------------------------
# git


def test_git_ls_remote_gets_the_agents_token_through_the_url_scoped_helper(signed_in_agent, auth_server):
    with git_server(auth_server) as server:
        result = run_git(signed_in_agent, "-c", "credential.helper=",
                         "-c", f"credential.{server.base}.helper={helper()}",
                         "ls-remote", f"{server.base}/repo.git")
        assert result.returncode == 0, result.stderr
        assert f"{SHA}\trefs/heads/main" in result.stdout
        # First an anonymous request (401 with a Basic challenge), then the helper's credential.
        assert server.seen[0][2] is None
        user, token = parse_basic(server.authorizations()[0])
    signed_in_agent.remember(token)
    assert user == "oauth2"
    assert token == signed_in_agent.token("work"), "git got the agent's cached access token"
    info = auth_server.introspect(token)
    assert info["active"] is True and info["client_id"] == CLIENT_ID
    assert token not in result.stderr


def test_git_uses_only_a_helper_scoped_to_the_url_path_with_use_http_path(signed_in_agent, auth_server):
    with git_server(auth_server) as server:
        scoped = ["-c", "credential.helper=", "-c", f"credential.{server.base}.useHttpPath=true"]
        other = run_git(signed_in_agent, *scoped, "-c", f"credential.{server.base}/other.git.helper={helper()}",
                        "ls-remote", f"{server.base}/repo.git")
        assert other.returncode != 0, "a helper for another path must not answer"
        assert not server.authorizations()
        same = run_git(signed_in_agent, *scoped, "-c", f"credential.{server.base}/repo.git.helper={helper()}",
                       "ls-remote", f"{server.base}/repo.git")
        assert same.returncode == 0, same.stderr
        assert len(server.authorizations()) >= 1


def test_git_fails_cleanly_when_the_account_must_sign_in(agent, auth_server):
    with git_server(auth_server) as server:
        result = run_git(agent, "-c", "credential.helper=", "-c", f"credential.{server.base}.helper={helper()}",
                         "ls-remote", f"{server.base}/repo.git")
        assert result.returncode != 0
        assert not server.authorizations(), "no credential was sent"
    # authctl's own error reaches the user through git's stderr; git then gives up (prompts are disabled here).
    assert "authctl: account 'work' needs to sign in: run `authctl login work`" in result.stderr
    assert "terminal prompts disabled" in result.stderr


def test_credential_get_speaks_gits_format(signed_in_agent, auth_server):
    before = int(time.time())
    result = credential_get(signed_in_agent)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert result.stdout.endswith("\n\n")
    lines = result.stdout[:-1].splitlines()
    assert [line.split("=", 1)[0] for line in lines] == ["username", "password", "password_expiry_utc"]
    fields = dict(line.split("=", 1) for line in lines)
    signed_in_agent.remember(fields["password"])
    assert fields["username"] == "oauth2"
    assert auth_server.introspect(fields["password"])["active"] is True
    expiry = int(fields["password_expiry_utc"])
    assert before + 60 < expiry <= int(time.time()) + auth_server.lifetime, "the access token's expiry, Unix seconds"
    token_json = json.loads(signed_in_agent.authctl("token", "work", "--json").stdout)
    assert (fields["password"], expiry) == (token_json["access_token"], token_json["expires_at"])


def test_credential_get_username_option_and_ignored_attributes(signed_in_agent):
    request = ("capability[]=authtype\nprotocol=https\nhost=github.com\npath=o/r.git\nusername=someone\n"
               "wwwauth[]=Basic realm=\"GitHub\"\n")  # ends at EOF, without the blank line
    result = credential_get(signed_in_agent, "--username", "x-access-token", input=request)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("username=x-access-token\npassword=")
    signed_in_agent.remember(result.stdout.split("password=", 1)[1].split("\n", 1)[0])


@pytest.mark.parametrize("action", ["store", "erase", "some-future-action"])
def test_credential_store_erase_and_unknown_actions_do_nothing(signed_in_agent, auth_server, action):
    token = signed_in_agent.token("work")
    posts = auth_server.token_posts()
    result = signed_in_agent.authctl("git-credential", "--account", "work", action,
                                     input=f"protocol=https\nhost=h\nusername=oauth2\npassword={token}\n\n")
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")
    assert auth_server.token_posts() == posts
    assert signed_in_agent.token("work") == token, "erase does not drop the agent's token"


def test_credential_get_login_required_prints_nothing_on_stdout(agent):
    result = credential_get(agent)
    assert result.returncode == 4
    assert result.stdout == ""
    assert result.stderr.startswith("authctl: account 'work' needs to sign in")


def test_credential_get_refuses_plain_http_to_a_remote_host(signed_in_agent):
    for request in ("protocol=http\nhost=git.example.com\n\n", "protocol=http\nhost=localhost:8080\n\n",
                    "protocol=ftp\nhost=example.com\n\n", "host=git.example.com\n\n"):
        result = credential_get(signed_in_agent, input=request)
        assert result.returncode == 1, request
        assert result.stdout == ""
        assert "password" not in result.stderr
    assert "refusing to send an access token over plain http to git.example.com" in \
        credential_get(signed_in_agent, input="protocol=http\nhost=git.example.com\n\n").stderr


def test_credential_input_limits_and_malformed_lines(signed_in_agent):
    long_line = "protocol=https\nhost=h\npath=" + "p" * (64 * 1024) + "\n\n"
    result = credential_get(signed_in_agent, input=long_line)
    assert (result.returncode, result.stdout) == (2, "")
    assert "line 3 is longer than 65536 bytes" in result.stderr
    result = credential_get(signed_in_agent, input="protocol=https\nnot a pair\n\n")
    assert (result.returncode, result.stdout) == (2, "")
    assert "line 2 is malformed" in result.stderr
    # Exactly 64 KiB is still a line.
    ok = credential_get(signed_in_agent, input="protocol=https\nhost=h\npath=" + "p" * (64 * 1024 - 5) + "\n\n")
    assert ok.returncode == 0, ok.stderr
    signed_in_agent.remember(ok.stdout.split("password=", 1)[1].split("\n", 1)[0])


def test_credential_helper_without_agent_and_usage_errors(agent):
    agent.stop()
    result = credential_get(agent)
    assert (result.returncode, result.stdout) == (3, "")
    assert "auth-agent is not running" in result.stderr
    # Without --account the agent maps the host (git_hosts), so no agent is "not running" here too.
    unmapped = agent.authctl("git-credential", "get", input="protocol=https\nhost=git.example.com\n\n")
    assert (unmapped.returncode, unmapped.stdout) == (3, "")
    no_action = agent.authctl("git-credential", "--account", "work", input="\n")
    assert no_action.returncode == 2 and "action" in no_action.stderr
    bad = agent.authctl("git-credential", "--account", "work", "--username", "", "get", input="\n")
    assert bad.returncode == 2


def test_git_credential_help_says_store_and_erase_do_nothing(agent):
    result = agent.authctl("git-credential", "--help")
    assert result.returncode == 0
    text = " ".join(result.stdout.split())
    assert "'store' and 'erase' (and any other action) read the request and do nothing" in text
    assert "credential.https://gitlab.com.helper \\ '!authctl git-credential --account gitlab'" in text
    assert "useHttpPath" in text
    assert "git-credential" in agent.authctl("--help").stdout


def test_kube_credential_help_shows_the_kubeconfig_snippet(agent):
    result = agent.authctl("kube-credential", "--help")
    assert result.returncode == 0
    assert "apiVersion: client.authentication.k8s.io/v1" in result.stdout
    assert "args: [kube-credential, work]" in result.stdout and "interactiveMode: Never" in result.stdout


# ----------------------------------------------------------------------------------------------------------------
# kubectl

RFC3339_UTC = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z")


def assert_exec_credential_v1(obj: dict):
    """client.authentication.k8s.io/v1 ExecCredential, as kubectl reads a plugin's output: apiVersion and kind
    fixed; status.token a non-empty string (no client certificate here); status.expirationTimestamp an RFC 3339
    time; no fields kubectl does not know (kubectl decodes strictly)."""
    assert isinstance(obj, dict)
    assert set(obj) <= {"apiVersion", "kind", "spec", "status"}, obj.keys()
    assert obj["apiVersion"] == "client.authentication.k8s.io/v1"
    assert obj["kind"] == "ExecCredential"
    status = obj["status"]
    assert isinstance(status, dict)
    assert set(status) <= {"token", "expirationTimestamp", "clientCertificateData", "clientKeyData"}, status.keys()
    assert isinstance(status["token"], str) and status["token"] and "\n" not in status["token"]
    assert isinstance(status["expirationTimestamp"], str) and RFC3339_UTC.fullmatch(status["expirationTimestamp"])


def unix_time(rfc3339: str) -> int:
    return int(datetime.strptime(rfc3339, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc).timestamp())


def jwt_claims(token: str) -> dict:
    payload = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))


def test_kube_credential_prints_a_v1_exec_credential_with_the_id_token(signed_in_agent, auth_server):
    result = signed_in_agent.authctl("kube-credential", "work")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert result.stdout.count("\n") == 1, "one line of JSON"
    obj = json.loads(result.stdout)
    assert_exec_credential_v1(obj)
    token = obj["status"]["token"]
    signed_in_agent.remember(token)
    assert token == signed_in_agent.token("work", "--id-token")
    claims = jwt_claims(token)
    assert claims["iss"] == auth_server.issuer and claims["aud"] == CLIENT_ID
    assert unix_time(obj["status"]["expirationTimestamp"]) == claims["exp"], "the ID token's own expiry"
    assert claims["exp"] > time.time() + 60


def test_kube_credential_access_token_flag(signed_in_agent, auth_server):
    result = signed_in_agent.authctl("kube-credential", "work", "--access-token")
    assert result.returncode == 0, result.stderr
    obj = json.loads(result.stdout)
    assert_exec_credential_v1(obj)
    token = obj["status"]["token"]
    signed_in_agent.remember(token)
    assert auth_server.introspect(token)["active"] is True
    expires_at = json.loads(signed_in_agent.authctl("token", "work", "--json").stdout)["expires_at"]
    assert unix_time(obj["status"]["expirationTimestamp"]) == expires_at


def test_kube_credential_login_required_and_no_id_token(agent, make_agent, auth_server):
    result = agent.authctl("kube-credential", "work")
    assert (result.returncode, result.stdout) == (4, "")
    assert "needs to sign in" in result.stderr
    # An account without 'openid' has no ID token: a clear error, and the flag that helps.
    plain = make_agent(work={"scopes": ["email"]})
    plain.login("work")
    result = plain.authctl("kube-credential", "work")
    assert (result.returncode, result.stdout) == (1, "")
    assert "has no ID token" in result.stderr and "--access-token" in result.stderr
    ok = plain.authctl("kube-credential", "work", "--access-token")
    assert ok.returncode == 0, ok.stderr
    plain.remember(json.loads(ok.stdout)["status"]["token"])


def kubectl_with_v1_exec() -> str:
    """The path of a kubectl that speaks client.authentication.k8s.io/v1 (GA in Kubernetes 1.22). Debian 12's own
    kubernetes-client is 1.20 (v1beta1 only), so this may legitimately be absent: the test above covers the
    protocol then, and this one says why it did not run."""
    path = shutil.which("kubectl", path=SYSTEM_PATH)
    if not path:
        pytest.skip("kubectl is not installed (Debian 12's kubernetes-client 1.20 predates ExecCredential v1)")
    out = subprocess.run([path, "version", "--client", "-o", "json"], capture_output=True, text=True, timeout=30)
    version = json.loads(out.stdout)["clientVersion"]
    major, minor = int(version["major"]), int(re.match(r"\d+", version["minor"]).group())
    if (major, minor) < (1, 22):
        pytest.skip(f"kubectl {major}.{minor} predates client.authentication.k8s.io/v1 (1.22)")
    return path


def self_signed_tls(directory, dns: tuple[str, ...] = ()) -> tuple[str, str, str]:
    """A certificate for IP 127.0.0.1 and the host names `dns` (kubectl sends no credentials over plain http:
    kubernetes/kubectl#744). Returns (certfile, keyfile, base64 of the certificate for the kubeconfig's
    certificate-authority-data)."""
    cert, key = directory / "tls.crt", directory / "tls.key"
    names = ",".join(["IP:127.0.0.1", *(f"DNS:{name}" for name in dns)])
    out = subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                          "-subj", f"/CN={dns[0] if dns else '127.0.0.1'}", "-addext", f"subjectAltName={names}",
                          "-keyout", str(key), "-out", str(cert)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, f"openssl failed: {out.stderr}"
    return str(cert), str(key), base64.b64encode(cert.read_bytes()).decode()


def write_kubeconfig(agent, server_url: str, ca_data: str, extra_args: list[str]) -> str:
    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": "test",
        "clusters": [{"name": "test", "cluster": {"server": server_url, "certificate-authority-data": ca_data}}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": "work"}}],
        "users": [{"name": "work", "user": {"exec": {
            "apiVersion": "client.authentication.k8s.io/v1", "command": str(bin_dir() / "authctl"),
            "args": ["kube-credential", "work", *extra_args], "interactiveMode": "Never"}}}],
    }
    path = agent.home / "kubeconfig"
    path.write_text(json.dumps(config))
    path.chmod(0o600)
    return str(path)


def run_kubectl(agent, kubectl: str, kubeconfig: str, *args: str) -> subprocess.CompletedProcess:
    env = dict(agent.env, KUBECONFIG=kubeconfig)
    return subprocess.run([kubectl, "--request-timeout=20s", *args], env=env, capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)


def test_real_kubectl_sends_the_id_token_from_the_exec_plugin(signed_in_agent, auth_server):
    kubectl = kubectl_with_v1_exec()
    id_token = signed_in_agent.token("work", "--id-token")
    body = b'{"kind":"Status","apiVersion":"v1","status":"Success","message":"hello from the stand-in"}'
    cert, key, ca_data = self_signed_tls(signed_in_agent.base)
    with CheckingServer(lambda h: h == f"Bearer {id_token}", {"/api/hello": ("application/json", body)},
                        'Bearer realm="kube"', tls=(cert, key)) as server:
        kubeconfig = write_kubeconfig(signed_in_agent, server.base, ca_data, [])
        result = run_kubectl(signed_in_agent, kubectl, kubeconfig, "get", "--raw", "/api/hello")
        assert result.returncode == 0, result.stderr
        assert "hello from the stand-in" in result.stdout
        assert server.authorizations() and set(server.authorizations()) == {f"Bearer {id_token}"}


@contextlib.contextmanager
def kube_api_taking_access_tokens(agent, auth_server):
    """A kube-apiserver stand-in over TLS whose /api/hello takes a bearer token only if the authorization server
    calls it active, and a kubeconfig whose exec plugin is `authctl kube-credential work --access-token`.
    Yields (server, kubeconfig)."""
    def active(header):
        return header.startswith("Bearer ") and auth_server.introspect(header[7:]).get("active") is True

    cert, key, ca_data = self_signed_tls(agent.base)
    with CheckingServer(active, {"/api/hello": ("application/json", b'{"kind":"Status"}')},
                        'Bearer realm="kube"', tls=(cert, key)) as server:
        yield server, write_kubeconfig(agent, server.base, ca_data, ["--access-token"])


def test_real_kubectl_with_access_token_and_when_sign_in_is_required(agent, auth_server):
    kubectl = kubectl_with_v1_exec()
    with kube_api_taking_access_tokens(agent, auth_server) as (server, kubeconfig):
        result = run_kubectl(agent, kubectl, kubeconfig, "get", "--raw", "/api/hello")
        assert result.returncode != 0
        assert "authctl: account 'work' needs to sign in" in result.stderr, "the plugin's stderr reaches the user"
        assert not server.authorizations()
        agent.login("work")
        result = run_kubectl(agent, kubectl, kubeconfig, "get", "--raw", "/api/hello")
        assert result.returncode == 0, result.stderr
        token = server.authorizations()[-1][7:]
    agent.remember(token)
    assert token == agent.token("work")
