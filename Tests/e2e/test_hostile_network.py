"""Hostile world, input from the network (issue 7): a token endpoint that accepts and never answers, one that
trickles its body, one behind a certificate the agent does not trust, and one that sends 50 MB. Each fails
cleanly with its own code (server_unreachable, server_unreachable, tls_error, invalid_token_response), within the
configured `[agent] http_timeout` rather than hanging; the refresh token in the keyring is untouched and still
accepted by the real server afterwards; the agent stays up.
"""
import json
import ssl
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import requests

from conftest import run_binary
from test_hostile import assert_alive, fault_proxy, proxied_agent, vm_rss_kib  # noqa: F401 (fixture)
import pytest

pytestmark = pytest.mark.release  # also run against the installed package (scripts/test)

HTTP_TIMEOUT = 2  # seconds: [agent] http_timeout for these tests (the default is 30)


def refresh_and_expect(agent, code: str, exit_code: int = 6, bound: float = 20) -> tuple[str, float]:
    """`authctl token work --refresh` must fail with `exit_code` and the account's last_error `code`, and return
    well within `bound` seconds (a hang shows as the bound, not as a stuck test). Returns (stderr, seconds)."""
    started = time.monotonic()
    result = agent.authctl("token", "work", "--refresh", timeout=bound + 10)
    elapsed = time.monotonic() - started
    assert result.returncode == exit_code, (result.returncode, result.stderr)
    assert result.stdout == ""
    assert elapsed < bound, f"the failure took {elapsed:.1f} s: the agent hung instead of timing out"
    last = agent.account_status("work")["last_error"]
    assert last["code"] == code, last
    return result.stderr, elapsed


def assert_refresh_token_kept(agent, keyring, auth_server, rt: str):
    assert keyring.secret_tool_lookup("work", auth_server.issuer) == rt, "the stored refresh token changed"
    assert keyring.secret_tool_count("work") == 1
    assert_alive(agent)


def signed_in_through_proxy(make_agent, keyring, auth_server, proxy):
    agent = proxied_agent(make_agent, proxy, agent={"http_timeout": HTTP_TIMEOUT})
    agent.login("work")
    rt = keyring.secret_tool_lookup("work", auth_server.issuer)
    assert rt
    agent.remember(rt)
    return agent, rt


def test_server_that_never_answers_times_out(make_agent, keyring, auth_server, fault_proxy):
    proxy = fault_proxy
    agent, rt = signed_in_through_proxy(make_agent, keyring, auth_server, proxy)

    # Accepts the request, never answers.
    proxy.set("hang_before")
    stderr, elapsed = refresh_and_expect(agent, "server_unreachable")
    assert proxy.reached.is_set(), "the refresh never reached the hanging server"
    assert "did not answer in time" in stderr, stderr
    assert elapsed >= HTTP_TIMEOUT * 0.8, f"failed after {elapsed:.1f} s, before the configured timeout"
    print(f"never-answering server: server_unreachable after {elapsed:.1f} s (http_timeout {HTTP_TIMEOUT} s)")
    assert_refresh_token_kept(agent, keyring, auth_server, rt)

    # Answers the head at once, then one byte every 0.5 s: the idle read timeout never fires, the deadline does.
    proxy.set("drip")
    stderr, elapsed = refresh_and_expect(agent, "server_unreachable")
    assert "did not answer in time" in stderr, stderr
    print(f"trickling body: server_unreachable after {elapsed:.1f} s")
    assert_refresh_token_kept(agent, keyring, auth_server, rt)

    # The kept refresh token still works at the real server.
    proxy.set("pass")
    token = agent.token("work", "--refresh")
    assert auth_server.introspect(token)["active"] is True
    agent.remember(keyring.secret_tool_lookup("work", auth_server.issuer))


def test_http_timeout_is_validated(make_agent):
    agent = make_agent(agent={"http_timeout": 0}, start=False)
    out = run_binary("auth-agent", ["--check-config"], agent.env)
    assert out.returncode == 78, out.stderr
    assert "http_timeout must be a number of seconds from 1 to 300" in out.stderr
    assert "config.toml:2:" in out.stderr


# ---------------------------------------------------------------------------------------------------------------
# TLS with a certificate the agent does not trust


def make_untrusted_ca(directory) -> tuple[str, str, str]:
    """A CA made here (not in the system trust store) and a server certificate for IP 127.0.0.1 signed by it."""
    ca_key, ca_crt = directory / "ca.key", directory / "ca.pem"
    key, csr, crt, ext = directory / "srv.key", directory / "srv.csr", directory / "srv.pem", directory / "srv.ext"

    def openssl(*args):
        r = subprocess.run(["openssl", *args], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, f"openssl {args[0]} failed: {r.stderr}"

    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(ca_key), "-out", str(ca_crt),
            "-days", "2", "-subj", "/CN=auth-agent hostile test CA")
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr), "-subj", "/CN=127.0.0.1")
    ext.write_text("subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n")
    openssl("x509", "-req", "-in", str(csr), "-CA", str(ca_crt), "-CAkey", str(ca_key), "-CAcreateserial",
            "-out", str(crt), "-days", "2", "-extfile", str(ext))
    return str(ca_crt), str(crt), str(key)


class TokenServerTLS:
    """An https token endpoint on 127.0.0.1 that would answer a valid token response to anybody who got through
    the handshake (so a refusal can only come from the certificate check)."""

    def __init__(self, cert: str, key: str):
        self.requests = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                outer.requests += 1
                body = json.dumps({"access_token": "tls-canary-access-token", "token_type": "Bearer",
                                   "expires_in": 3600}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.server.server_address[1]}/o/token/"

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


def test_untrusted_tls_certificate_is_a_tls_error(make_agent, keyring, auth_server, tmp_path):
    ca, cert, key = make_untrusted_ca(tmp_path)
    tls = TokenServerTLS(cert, key)
    try:
        # Control: with its CA the server works, so the agent's refusal below is the certificate check.
        ok = requests.post(tls.url, data={"grant_type": "refresh_token"}, verify=ca, timeout=10,
                           proxies={"http": None, "https": None})
        assert ok.status_code == 200 and ok.json()["access_token"] == "tls-canary-access-token"
        served = tls.requests

        agent = make_agent(agent={"http_timeout": 10})
        agent.login("work")
        rt = keyring.secret_tool_lookup("work", auth_server.issuer)
        agent.remember(rt)
        # Point the account's token endpoint at the untrusted server and restart (the sign-in survives).
        agent.stop()
        text = agent.config_path.read_text().replace("[accounts.work]\n", f'[accounts.work]\ntoken_endpoint = "{tls.url}"\n')
        agent.write_config(text)
        agent.start()

        stderr, elapsed = refresh_and_expect(agent, "tls_error")
        assert "TLS" in stderr and "certificate" in stderr.lower(), stderr
        assert "hint:" in stderr
        assert tls.requests == served, "a request got through the handshake: the certificate was not checked"
        assert "tls-canary-access-token" not in agent.log()
        assert_refresh_token_kept(agent, keyring, auth_server, rt)
        print(f"untrusted certificate: tls_error in {elapsed:.2f} s: {stderr.splitlines()[0]}")
    finally:
        tls.stop()


# ---------------------------------------------------------------------------------------------------------------
# Oversized and absurd token responses


def test_50_mb_body_is_capped_and_reported_as_a_malformed_response(make_agent, keyring, auth_server, fault_proxy):
    proxy = fault_proxy
    agent, rt = signed_in_through_proxy(make_agent, keyring, auth_server, proxy)
    agent.token("work")
    rss_before = vm_rss_kib(agent.proc.pid)
    body = b'{"access_token":"canned-50mb","token_type":"Bearer","padding":"' + b"p" * (50 * 1024 * 1024) + b'"}'
    proxy.set("canned", (200, "application/json", body))
    stderr, elapsed = refresh_and_expect(agent, "invalid_token_response", bound=30)
    assert "too large" in stderr, stderr
    rss_after = vm_rss_kib(agent.proc.pid)
    print(f"50 MB body: invalid_token_response in {elapsed:.2f} s; RSS {rss_before} -> {rss_after} KiB")
    assert rss_after - rss_before < 20 * 1024, "the agent buffered far more than its 1 MiB cap"
    assert_refresh_token_kept(agent, keyring, auth_server, rt)

    # The same body with a 503 is a server outage, not a malformed token response.
    proxy.set("canned", (503, "text/html", body))
    refresh_and_expect(agent, "server_error", bound=30)
    assert_refresh_token_kept(agent, keyring, auth_server, rt)


def test_absurd_expires_in_is_refused(make_agent, keyring, auth_server, fault_proxy):
    """The parser accepts 1...366 days (an integer, or an integer in a string); anything else, however large, is
    invalid_token_response and the refresh token is kept."""
    proxy = fault_proxy
    agent, rt = signed_in_through_proxy(make_agent, keyring, auth_server, proxy)
    for expires_in in (10**12, "1000000000000", 10**30, 1e300, -(10**12), 0, 1.5, True, "3600s"):
        payload = json.dumps({"access_token": "canned-expiry", "token_type": "Bearer", "expires_in": expires_in})
        proxy.set("canned", (200, "application/json", payload.encode()))
        stderr, _ = refresh_and_expect(agent, "invalid_token_response")
        assert "expires_in" in stderr, (expires_in, stderr)
        assert_refresh_token_kept(agent, keyring, auth_server, rt)
    # A sane value through the same path is accepted (the refusals above are about the values).
    proxy.set("pass")
    token = agent.token("work", "--refresh")
    assert auth_server.introspect(token)["active"] is True
    agent.remember(keyring.secret_tool_lookup("work", auth_server.issuer))
