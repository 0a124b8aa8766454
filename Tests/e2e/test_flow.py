"""The headline path with the real binaries: sign in through the (scripted) browser, keep the refresh token in the
real keyring, serve access tokens, refresh, survive a restart, sign out."""
import base64
import json
import re
import signal
import socket
import subprocess
import time
from urllib.parse import parse_qs, urlsplit

from conftest import CLIENT_ID, FAKE_BROWSER, read_replies, read_until, stored_token, wait_for
from test_hostile import fault_proxy, proxied_agent  # noqa: F401 (fixture)
import pytest

pytestmark = pytest.mark.release  # also run against the installed package (scripts/test)

URL_RE = re.compile(r"(http://127\.0\.0\.1:\d+/o/authorize/\?\S+)")


def authorization_url(stderr: str) -> str:
    match = URL_RE.search(stderr)
    assert match, f"no authorization URL on stderr:\n{stderr}"
    return match.group(1)


def jwt_claims(token: str) -> dict:
    parts = token.split(".")
    assert len(parts) == 3 and all(parts), f"not a JWS compact token: {len(parts)} parts"
    payload = parts[1] + "=" * (-len(parts[1]) % 4)
    return json.loads(base64.urlsafe_b64decode(payload))


def test_login_prints_the_authorization_url_and_signs_in(agent, keyring, auth_server):
    posts = auth_server.token_posts()
    result = agent.authctl("login", "work")
    assert result.returncode == 0, result.stderr
    assert "Signed in to 'work'" in result.stdout
    assert "alice@example.test" in result.stdout
    assert "Opened your browser" in result.stderr

    url = authorization_url(result.stderr)
    assert url.startswith(f"{auth_server.issuer}/authorize/?")
    # The exact encoding the agent uses (RFC 6749 Appendix B form encoding: only unreserved characters stay).
    assert "code_challenge_method=S256" in url
    assert "redirect_uri=http%3A%2F%2F127.0.0.1%3A" in url
    assert "%2Foauth2%2Fcallback%2Fwork&" in url or url.endswith("%2Foauth2%2Fcallback%2Fwork")
    assert "state=" in url and "nonce=" in url
    assert "localhost" not in url
    params = {k: v for k, v in parse_qs(urlsplit(url).query).items()}
    assert all(len(v) == 1 for v in params.values()), "a parameter is repeated"
    params = {k: v[0] for k, v in params.items()}
    assert params["response_type"] == "code"
    assert params["client_id"] == CLIENT_ID
    assert params["scope"] == "openid email offline_access"
    assert params["code_challenge_method"] == "S256"
    assert re.fullmatch(r"[A-Za-z0-9_-]{43}", params["code_challenge"]), "S256 challenge is 43 base64url chars"
    assert len(params["state"]) >= 22, "state must carry at least 128 bits"
    assert len(params["nonce"]) >= 22
    assert params["state"] != params["nonce"]
    redirect = urlsplit(params["redirect_uri"])
    assert redirect.scheme == "http" and redirect.hostname == "127.0.0.1"
    assert redirect.path == "/oauth2/callback/work" and not redirect.query
    assert redirect.port not in (None, 0, auth_server.port)

    # The browser really went through the server and the callback was accepted.
    log = agent.browser_log.read_text()
    assert "GET /oauth2/callback/work -> 200 (callback)" in log
    assert "DONE login callback=200" in log
    # Exactly one code exchange.
    assert auth_server.token_posts() == posts + 1
    # The loopback listener is closed once the sign-in is done (RFC 8252 §8.3).
    with socket.socket() as s:
        s.settimeout(2)
        assert s.connect_ex(("127.0.0.1", redirect.port)) != 0, "the redirect listener is still open"

    # A second sign-in uses a fresh state, nonce and PKCE challenge.
    again = agent.authctl("login", "work")
    assert again.returncode == 0, again.stderr
    params2 = {k: v[0] for k, v in parse_qs(urlsplit(authorization_url(again.stderr)).query).items()}
    for key in ("state", "nonce", "code_challenge"):
        assert params2[key] != params[key], f"{key} was reused"
    assert keyring.secret_tool_count("work") == 1


def test_keyring_holds_exactly_one_refresh_token(signed_in_agent, keyring, auth_server):
    rt = keyring.secret_tool_lookup("work", auth_server.issuer, CLIENT_ID)
    assert rt and len(rt) >= 20
    assert keyring.secret_tool_count("work") == 1
    (item,) = keyring.secret_tool_attributes("work")
    assert item["attribute.account"] == "work"
    assert item["attribute.issuer"] == auth_server.issuer
    assert item["attribute.client_id"] == CLIENT_ID
    assert stored_token(rt) not in item.get("label", "")
    # It is the refresh token the server issued for this sign-in: it can be spent exactly once (rotation).
    assert stored_token(rt) in auth_server.issued_secrets()


def test_token_is_cached_and_active(signed_in_agent, auth_server):
    agent = signed_in_agent
    posts = auth_server.token_posts()
    result = agent.authctl("token", "work")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    lines = result.stdout.split("\n")
    assert lines[-1] == "" and len(lines) == 2, f"expected exactly one line, got {result.stdout!r}"
    token = lines[0]
    assert re.fullmatch(r"[A-Za-z0-9._~+/=-]+", token)
    info = auth_server.introspect(token)
    assert info["active"] is True
    assert info["client_id"] == CLIENT_ID
    assert info["username"] == "alice"
    assert set(info["scope"].split()) == {"openid", "email", "offline_access"}

    assert agent.token("work") == token
    assert auth_server.token_posts() == posts, "a fresh cached token must not cause a token request"


def test_forced_refresh_rotates_the_refresh_token(signed_in_agent, keyring, auth_server):
    agent = signed_in_agent
    old_at = agent.token("work")
    old_rt = keyring.secret_tool_lookup("work", auth_server.issuer)
    posts = auth_server.token_posts()

    new_at = agent.token("work", "--refresh")
    assert new_at != old_at
    assert auth_server.token_posts() == posts + 1
    assert auth_server.introspect(new_at)["active"] is True
    new_rt = keyring.secret_tool_lookup("work", auth_server.issuer)
    assert new_rt and new_rt != old_rt, "the rotated refresh token was not saved"
    agent.remember(new_rt)
    assert keyring.secret_tool_count("work") == 1
    # The cache now holds the new token.
    assert agent.token("work") == new_at


def test_restart_uses_the_stored_refresh_token_without_a_browser(signed_in_agent, keyring, auth_server):
    agent = signed_in_agent
    before = agent.token("work")
    runs = agent.browser_runs()
    assert runs == 1
    agent.restart()
    posts = auth_server.token_posts()
    token = agent.token("work")
    assert token != before, "a restarted agent has no cache: it must have refreshed"
    assert auth_server.token_posts() == posts + 1
    assert agent.browser_runs() == runs, "the browser was started again"
    assert auth_server.introspect(token)["active"] is True
    rt = keyring.secret_tool_lookup("work", auth_server.issuer)
    assert rt
    agent.remember(rt)
    assert agent.account_status("work")["signed_in"] is True


def test_status_text_and_json(signed_in_agent, auth_server):
    agent = signed_in_agent
    text = agent.authctl("status")
    assert text.returncode == 0, text.stderr
    assert "signed in" in text.stdout and "not signed in" not in text.stdout
    assert "keyring: available" in text.stdout
    assert "http://127.0.0.1/oauth2/callback/work" in text.stdout
    assert auth_server.issuer in text.stdout
    assert str(agent.socket_path) in text.stdout
    assert "\x1b[" not in text.stdout, "no colour when stdout is not a terminal"

    status = agent.status_json()
    assert status["agent"]["keyring"] == "available"
    assert status["agent"]["protocol"] == 1
    assert status["agent"]["pid"] == agent.proc.pid
    assert status["agent"]["socket"] == str(agent.socket_path)
    (account,) = status["accounts"]
    assert account["name"] == "work"
    assert account["signed_in"] is True
    assert account["login_pending"] is False
    assert account["issuer"] == auth_server.issuer
    assert account["client_id"] == CLIENT_ID
    assert account["redirect_uri"] == "http://127.0.0.1/oauth2/callback/work"
    assert account["scopes"] == ["openid", "email", "offline_access"]
    assert 3500 < account["access_token_expires_in"] <= 3600
    assert abs(account["access_token_expires_at"] - (time.time() + account["access_token_expires_in"])) < 5
    assert "last_error" not in account or account["last_error"] is None
    # Nothing secret in the status.
    assert "token\":" not in json.dumps(status).replace("access_token_expires", "")


def test_logout_during_a_rotating_refresh_revokes_the_token_the_server_rotated_to(
        make_agent, keyring, auth_server, fault_proxy):
    """A refresh is under way (the server has rotated the refresh token; its answer is on the way) when the user
    signs out: the sign-out waits for it, so the rotated token is the one revoked and deleted, and nothing of the
    sign-in is left, rather than the old token revoked and the new one stored a moment after the "signed out"."""
    agent = proxied_agent(make_agent, fault_proxy)
    agent.login("work")
    old_rt = keyring.secret_tool_lookup("work", auth_server.issuer)
    agent.remember(old_rt)
    fault_proxy.set("hold_response")
    refresh = agent.authctl_popen("token", "work", "--refresh")
    assert fault_proxy.reached.wait(20), "the refresh never reached the token endpoint"
    logout = agent.authctl_popen("logout", "work")
    wait_for(lambda: re.search(r"operation=logout .*\] request$", agent.log(), re.M) is not None, 20,
             "the agent to take the logout request")
    fault_proxy.set("pass")
    fault_proxy.release.set()
    out, err = refresh.communicate(timeout=30)
    assert refresh.returncode == 0, (refresh.returncode, err)
    rotated_access = out.strip()
    agent.remember(rotated_access)
    out, err = logout.communicate(timeout=30)
    assert logout.returncode == 0, (logout.returncode, err)
    assert keyring.secret_tool_count("work") == 0, "a refresh token is left in the keyring after the sign-out"
    assert auth_server.introspect(rotated_access)["active"] is False, \
        "the access token of the rotated refresh token still works: the rotated one was not revoked"
    assert auth_server.refresh_token_works(old_rt) is False
    token = agent.authctl("token", "work")
    assert token.returncode == 4, (token.returncode, token.stderr)


def test_logout_revokes_and_forgets(signed_in_agent, keyring, auth_server):
    agent = signed_in_agent
    access = agent.token("work")
    rt = keyring.secret_tool_lookup("work", auth_server.issuer)
    result = agent.authctl("logout", "work")
    assert result.returncode == 0, result.stderr
    assert "revoked" in result.stdout
    assert "warning" not in result.stderr
    assert keyring.secret_tool_lookup("work", auth_server.issuer) is None
    assert keyring.secret_tool_count("work") == 0
    # (DOT's introspection only knows access tokens: a refresh token is always "inactive" there, so the real check
    # is to try to spend it.)
    assert auth_server.introspect(rt)["active"] is False
    assert auth_server.refresh_token_works(rt) is False, "the refresh token still works after logout"
    assert auth_server.introspect(access)["active"] is False, "revoking the refresh token revokes its access token"
    assert any(line.startswith("POST /o/revoke_token/ 200") for line in auth_server.requests_log())

    token = agent.authctl("token", "work")
    assert token.returncode == 4, (token.returncode, token.stderr)
    assert token.stdout == ""
    assert "authctl login work" in token.stderr
    # Cached access tokens were dropped: nothing is served any more (checked above), and status agrees.
    account = agent.account_status("work")
    assert account["signed_in"] is False
    assert account.get("access_token_expires_in") is None
    assert access  # (kept for the canary)

    again = agent.authctl("logout", "work")
    assert again.returncode == 0, again.stderr
    assert "was not signed in" in again.stdout


def test_token_output_formats(signed_in_agent, auth_server):
    agent = signed_in_agent
    plain = agent.token("work")

    result = agent.authctl("token", "work", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["account"] == "work"
    assert data["access_token"] == plain
    assert data["token_type"] == "Bearer"
    assert 3500 < data["expires_in"] <= 3600
    assert abs(data["expires_at"] - (time.time() + data["expires_in"])) < 5
    assert data["scopes"] == ["openid", "email", "offline_access"]
    assert "refresh_token" not in data
    assert "id_token" not in data, "--json alone carries the access token only"

    with_id = agent.authctl("token", "work", "--json", "--id-token")
    assert with_id.returncode == 0, with_id.stderr
    data = json.loads(with_id.stdout)
    assert data["access_token"] == plain
    claims = jwt_claims(data["id_token"])
    assert claims["iss"] == auth_server.issuer
    assert claims["aud"] == CLIENT_ID or CLIENT_ID in claims["aud"]
    assert claims["email"] == "alice@example.test"

    header = agent.authctl("token", "work", "--header")
    assert header.returncode == 0, header.stderr
    assert header.stdout == f"Authorization: Bearer {plain}\n"

    id_token = agent.authctl("token", "work", "--id-token")
    assert id_token.returncode == 0, id_token.stderr
    assert id_token.stdout.strip() == data["id_token"]
    assert jwt_claims(id_token.stdout.strip())["iss"] == auth_server.issuer

    both = agent.authctl("token", "work", "--header", "--id-token")
    assert both.returncode == 2, (both.returncode, both.stderr)
    negative = agent.authctl("token", "work", "--min-valid", "-5")
    assert negative.returncode == 2, (negative.returncode, negative.stderr)


def test_interactive_token_signs_in_when_needed(agent, keyring, auth_server):
    not_yet = agent.authctl("token", "work")
    assert not_yet.returncode == 4, not_yet.stderr
    assert agent.browser_runs() == 0

    result = agent.authctl("token", "work", "--interactive")
    assert result.returncode == 0, result.stderr
    token = result.stdout.strip()
    assert result.stdout == token + "\n"
    assert authorization_url(result.stderr)
    assert agent.browser_runs() == 1
    assert auth_server.introspect(token)["active"] is True
    assert keyring.secret_tool_count("work") == 1
    agent.remember(keyring.secret_tool_lookup("work", auth_server.issuer))

    # Signed in now: --interactive does not open the browser again.
    assert agent.token("work", "--interactive") == token
    assert agent.browser_runs() == 1


def test_single_flight_refresh_over_the_socket(signed_in_agent, keyring, auth_server):
    """30 clients that all ask for a forced refresh: every one needs a refresh. The 30 connections are opened first
    and the requests
    written back to back (within ~2 ms), i.e. all arrive while the first refresh (10-20 ms at the server) runs, so
    single flight means one token request; allow 2 for a slow scheduler."""
    agent = signed_in_agent
    posts = auth_server.token_posts()
    conns = [agent.connect(timeout=30) for _ in range(30)]
    try:
        for i, conn in enumerate(conns):
            conn.sendall(json.dumps({"v": 1, "id": 100 + i, "op": "token", "account": "work",
                                     "force_refresh": True}).encode() + b"\n")
        replies = [read_replies(conn, 1, 30) for conn in conns]
    finally:
        for conn in conns:
            conn.close()
    for i, reply in enumerate(replies):
        assert len(reply) == 1, f"connection {i} got no reply"
        assert reply[0]["id"] == 100 + i
        assert reply[0]["result"]["access_token"], reply[0]
        agent.remember(reply[0]["result"]["access_token"])
    refreshes = auth_server.token_posts() - posts
    assert 1 <= refreshes <= 2, f"{refreshes} token requests for 30 simultaneous requests"
    agent.remember(keyring.secret_tool_lookup("work", auth_server.issuer))
    token = agent.token("work")
    assert auth_server.introspect(token)["active"] is True
    assert auth_server.token_posts() - posts == refreshes, "the shared refresh's token was not cached"


def test_single_flight_refresh_with_authctl(make_agent, keyring, auth_server, fault_proxy):
    """30 concurrent `authctl token --refresh` processes (each a new process, as users' programs run it) share the
    one refresh they force while it runs. The proxy holds that refresh at the server until all 30 requests have
    reached the agent, so the count does not depend on how fast this machine starts processes (unheld, a slow
    machine starts them over several refreshes). The refresh token must survive (rotation with grace 0: concurrent
    refreshes with one token would burn it)."""
    agent = proxied_agent(make_agent, fault_proxy)
    agent.login("work")
    agent.remember(keyring.secret_tool_lookup("work", auth_server.issuer))
    posts = auth_server.token_posts()
    fault_proxy.set("hold")
    requests_before = agent.log().count("operation=token")
    procs = [agent.authctl_popen("token", "work", "--refresh") for _ in range(30)]
    try:
        assert fault_proxy.reached.wait(30), "the refresh never reached the server"
        wait_for(lambda: agent.log().count("operation=token") - requests_before >= 30, 60,
                 "all 30 requests at the agent while the refresh is held")
    finally:
        fault_proxy.release.set()
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=60)
        results.append((proc.returncode, out, err))
        agent.remember(out.strip())
    codes = [rc for rc, _, _ in results]
    assert codes == [0] * 30, (codes, results[0][2])
    assert all(out.strip() and err == "" for _, out, err in results)
    assert len({out.strip() for _, out, _ in results}) == 1, "the 30 callers got different tokens"
    refreshes = auth_server.token_posts() - posts
    assert refreshes == 1, f"{refreshes} token requests for 30 concurrent clients"

    # No refresh token was lost on the way: the agent still refreshes.
    token = agent.token("work", "--refresh")
    assert auth_server.introspect(token)["active"] is True
    assert keyring.secret_tool_count("work") == 1
    agent.remember(keyring.secret_tool_lookup("work", auth_server.issuer))
    assert agent.alive()


def test_two_accounts_are_independent(make_agent, keyring, auth_server):
    agent = make_agent(accounts={
        "work": {"issuer": auth_server.issuer, "client_id": CLIENT_ID, "scopes": ["openid", "email", "offline_access"],
                 "login_timeout": 30},
        "personal": {"issuer": auth_server.issuer, "client_id": CLIENT_ID, "scopes": ["read", "offline_access"],
                     "login_timeout": 30},
    })
    accounts = agent.authctl("accounts")
    assert accounts.returncode == 0
    assert "http://127.0.0.1/oauth2/callback/personal" in accounts.stdout
    agent.login("work")
    result = agent.authctl("login", "personal")
    assert result.returncode == 0, result.stderr
    assert "%2Foauth2%2Fcallback%2Fpersonal" in authorization_url(result.stderr)
    work_rt = keyring.secret_tool_lookup("work", auth_server.issuer)
    personal_rt = keyring.secret_tool_lookup("personal", auth_server.issuer)
    assert work_rt and personal_rt and work_rt != personal_rt
    agent.remember(work_rt, personal_rt)
    work, personal = agent.token("work"), agent.token("personal")
    assert work != personal
    assert auth_server.introspect(personal)["scope"].split() == ["read", "offline_access"] or \
        set(auth_server.introspect(personal)["scope"].split()) == {"read", "offline_access"}
    # No OpenID scope: no ID token to print.
    no_id = agent.authctl("token", "personal", "--id-token")
    assert no_id.returncode == 1 and "ID token" in no_id.stderr

    assert agent.authctl("logout", "work").returncode == 0
    assert keyring.secret_tool_lookup("work", auth_server.issuer) is None
    assert keyring.secret_tool_lookup("personal", auth_server.issuer) == personal_rt
    assert agent.token("personal") == personal
    names = {a["name"]: a["signed_in"] for a in agent.status_json()["accounts"]}
    assert names == {"work": False, "personal": True}


def test_confidential_client(make_agent, keyring, auth_server):
    agent = make_agent(work={"client_id": "auth-agent-test-confidential", "client_secret": "confidential-secret"})
    agent.login("work")
    rt = keyring.secret_tool_lookup("work", auth_server.issuer, "auth-agent-test-confidential")
    assert rt
    agent.remember(rt)
    token = agent.token("work", "--refresh")
    info = auth_server.introspect(token)
    assert info["active"] is True and info["client_id"] == "auth-agent-test-confidential"
    assert "confidential-secret" not in agent.log()
    assert "confidential-secret" not in agent.authctl("status", "--json").stdout


def test_rfc9207_iss_in_the_authorization_response(make_agent, keyring, iss_auth_server):
    agent = make_agent(server=iss_auth_server)
    agent.login("work")
    assert "DONE login callback=200" in agent.browser_log.read_text()
    token = agent.token("work")
    assert iss_auth_server.introspect(token)["active"] is True
    agent.remember(keyring.secret_tool_lookup("work", iss_auth_server.issuer))


def test_concurrent_logins_share_one_sign_in(make_agent, keyring, auth_server):
    """Two `authctl login work` at once join one pending sign-in (one browser start, one URL); Ctrl-C on one of
    them does not cancel it for the other; completing it in the browser answers the remaining one."""
    agent = make_agent(browser_mode="none")
    first = agent.authctl_popen("login", "work")
    second = None
    try:
        url1 = URL_RE.search(read_until(first.stderr, "Waiting for the sign-in", 20)).group(1)
        second = agent.authctl_popen("login", "work")
        url2 = URL_RE.search(read_until(second.stderr, "Waiting for the sign-in", 20)).group(1)
        assert url1 == url2, "the second login did not join the pending sign-in"
        wait_for(lambda: "DONE none" in agent.browser_log.read_text(), 10, "the browser to run")
        assert agent.browser_runs() == 1

        first.send_signal(signal.SIGINT)
        first.communicate(timeout=10)
        # The agent has taken the first client's leaving (and decided whether to cancel) once it logs it.
        wait_for(lambda: any(line in agent.log() for line in ("a caller stopped waiting for the sign-in",
                                                               "sign-in cancelled")), 10, "the agent to see it go")
        assert "sign-in cancelled" not in agent.log(), "Ctrl-C on one client cancelled both"
        assert agent.account_status("work")["login_pending"] is True, "Ctrl-C on one client cancelled both"

        # Play the browser ourselves, on the URL the agent printed.
        browser = subprocess.run([str(FAKE_BROWSER), url2], env=dict(agent.env, FAKE_BROWSER_MODE="login"),
                                 capture_output=True, text=True, timeout=60)
        assert browser.returncode == 0, browser.stderr
        out, err = second.communicate(timeout=30)
        assert second.returncode == 0, err
        assert "Signed in to 'work'" in out
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.communicate(timeout=10)
    assert keyring.secret_tool_count("work") == 1
    agent.remember(keyring.secret_tool_lookup("work", auth_server.issuer))
    assert agent.token("work")


def test_logout_cancels_a_pending_sign_in(make_agent, keyring):
    agent = make_agent(browser_mode="none")
    login = agent.authctl_popen("login", "work")
    try:
        read_until(login.stderr, "Waiting for the sign-in", 20)
        assert agent.authctl("logout", "work").returncode == 0
        out, err = login.communicate(timeout=10)
    finally:
        if login.poll() is None:
            login.kill()
            login.communicate(timeout=10)
    assert login.returncode == 7, (login.returncode, err)
    assert agent.account_status("work")["login_pending"] is False
