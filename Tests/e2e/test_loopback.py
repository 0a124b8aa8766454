"""The loopback redirect listener under the real agent (RFC 8252 §7.3, §8.3, B.5; SECURITY.md 4-6): what it binds,
hostile local clients during a pending sign-in, the IPv6 literal, and ID token verification against the real
server's JWKS."""
import re
import socket
import subprocess
import time
from urllib.parse import parse_qs, urlsplit

from conftest import FAKE_BROWSER, read_until, wait_for

URL_RE = re.compile(r"(http://127\.0\.0\.1:\d+/o/authorize/\?\S+)")


def _decode(hexaddr: str, v6: bool) -> str:
    raw = bytes.fromhex(hexaddr)
    # /proc/net/tcp* print each 32-bit word in host (little-endian) order.
    raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    return socket.inet_ntop(socket.AF_INET6 if v6 else socket.AF_INET, raw)


def listening_addresses(port: int) -> list[str]:
    """Every local address in LISTEN state on `port` (IPv4 and IPv6), from /proc/net/tcp and /proc/net/tcp6."""
    found = []
    for path, v6 in (("/proc/net/tcp", False), ("/proc/net/tcp6", True)):
        with open(path) as f:
            next(f)
            for line in f:
                fields = line.split()
                address, hexport = fields[1].split(":")
                if fields[3] == "0A" and int(hexport, 16) == port:
                    found.append(_decode(address, v6))
    return found


def pending_redirect(login: subprocess.Popen) -> tuple[str, int]:
    url = URL_RE.search(read_until(login.stderr, "Waiting for the sign-in", 20)).group(1)
    redirect = urlsplit(parse_qs(urlsplit(url).query)["redirect_uri"][0])
    return url, redirect.port


def test_hostile_local_clients_do_not_block_the_sign_in(make_agent, keyring, auth_server):
    """During a pending sign-in: the listener is on 127.0.0.1 only; 100 idle and 20 half-sent connections and a
    1 MB request line do not stop the browser's redirect from completing it; afterwards nothing listens."""
    agent = make_agent(browser_mode="none")
    login = agent.authctl_popen("login", "work")
    held: list[socket.socket] = []
    try:
        url, port = pending_redirect(login)
        assert listening_addresses(port) == ["127.0.0.1"], "the listener must bind the literal only, never a wildcard"

        for i in range(120):
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            if i >= 100:
                s.sendall(b"GET /oauth2/callback/work?code=")
            held.append(s)
        big = socket.create_connection(("127.0.0.1", port), timeout=5)
        started = time.monotonic()
        try:
            big.sendall(b"GET /oauth2/callback/work?code=" + b"A" * (1 << 20) + b" HTTP/1.1\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass  # cut off mid-send: the cap at work
        try:
            reply = big.recv(4096)
        except ConnectionResetError:
            reply = b""
        big.close()
        assert reply == b"" or reply.startswith(b"HTTP/1.1 431"), reply[:80]
        assert time.monotonic() - started < 5, "the oversized request was not cut off promptly"
        assert agent.account_status("work")["login_pending"] is True, "the hostile requests disturbed the sign-in"

        browser = subprocess.run([str(FAKE_BROWSER), url], env=dict(agent.env, FAKE_BROWSER_MODE="login"),
                                 capture_output=True, text=True, timeout=60)
        assert browser.returncode == 0, browser.stderr
        out, err = login.communicate(timeout=30)
        assert login.returncode == 0, err
        assert "Signed in to 'work'" in out
    finally:
        for s in held:
            s.close()
        if login.poll() is None:
            login.kill()
            login.communicate(timeout=10)
    wait_for(lambda: listening_addresses(port) == [], 5, "the redirect listener to close")
    with socket.socket() as s:
        s.settimeout(2)
        assert s.connect_ex(("127.0.0.1", port)) != 0, "the redirect port still accepts connections"
    agent.remember(keyring.secret_tool_lookup("work", auth_server.issuer))


def test_ipv6_literal_when_configured(make_agent, keyring, auth_server):
    """redirect_host = "[::1]": the listener binds ::1 only and the redirect URI names [::1]; sign-in completes."""
    agent = make_agent(work={"redirect_host": "[::1]"})
    result = agent.authctl("login", "work")
    assert result.returncode == 0, result.stderr
    url = URL_RE.search(result.stderr).group(1)
    redirect = urlsplit(parse_qs(urlsplit(url).query)["redirect_uri"][0])
    assert redirect.netloc.startswith("[::1]:") and redirect.path == "/oauth2/callback/work"
    assert "localhost" not in url
    assert "GET /oauth2/callback/work -> 200 (callback)" in agent.browser_log.read_text()
    assert listening_addresses(redirect.port) == [], "the listener is closed after the sign-in"
    agent.remember(keyring.secret_tool_lookup("work", auth_server.issuer))


def test_sign_in_verifies_the_id_token_against_the_servers_jwks(make_agent, keyring, private_auth_server):
    """The real server signs ID tokens with RS256; the agent fetches its JWKS (once, then from the cache) to verify."""
    agent = make_agent(server=private_auth_server,
                       accounts={"work": {"issuer": private_auth_server.issuer, "client_id": "auth-agent-test",
                                          "scopes": ["openid", "email", "offline_access"], "login_timeout": 30}})
    for _ in range(2):
        result = agent.authctl("login", "work")
        assert result.returncode == 0, result.stderr
        assert "alice@example.test" in result.stdout
    jwks = [line for line in private_auth_server.requests_log() if line.startswith("GET /o/.well-known/jwks.json ")]
    assert len(jwks) == 1 and " 200 " in jwks[0], jwks
    agent.remember(keyring.secret_tool_lookup("work", private_auth_server.issuer))
