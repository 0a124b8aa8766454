"""Refresh behaviours of issue 4 that had only unit tests, against the real agent, keyring and Django OAuth
Toolkit: proactive refresh ahead of expiry with no caller waiting, a 429 whose Retry-After the agent honours, and a
DNS failure that keeps the refresh token. Waits are for events (with a deadline), never timing assertions."""
import json

import pytest

from conftest import AuthServer, default_account, render_config, wait_for
from faultproxy import FaultProxy
from test_hostile import fault_proxy, proxied_agent  # noqa: F401 (fixture)

pytestmark = pytest.mark.release  # also run against the installed package (scripts/test)


@pytest.fixture
def short_lived_server(tmp_path):
    """Access tokens valid for 20 s: the early-refresh margin is 10 s (half the lifetime), plus up to 20 % jitter."""
    server = AuthServer(tmp_path / "authserver", lifetime=20)
    server.start()
    yield server
    server.stop()


def test_recently_used_account_is_refreshed_ahead_of_expiry_without_a_caller(make_agent, keyring, short_lived_server):
    server = short_lived_server
    agent = make_agent(server=server)
    agent.login("work")
    agent.remember(keyring.secret_tool_lookup("work", server.issuer))
    first = agent.token("work")  # the account is in use
    posts = server.token_posts()
    refreshes = agent.log().count("refreshed access token")
    # Nobody asks; the agent's own timer must refresh inside the margin, before the token expires.
    wait_for(lambda: server.token_posts() > posts, 30, "the proactive refresh")
    # The server logs the POST before the agent has read the reply and stored the new token.
    wait_for(lambda: agent.log().count("refreshed access token") > refreshes, 15, "the proactive refresh to be stored")
    assert server.token_posts() == posts + 1
    second = agent.token("work")
    agent.remember(second, keyring.secret_tool_lookup("work", server.issuer))
    assert second != first, "the caller got the proactively refreshed token"
    assert server.token_posts() == posts + 1, "served from the cache: no request on the caller's behalf"
    assert server.introspect(second)["active"] is True
    print(f"proactive refresh: 1 request with no caller; the next caller got the new token from the cache")


def test_429_retry_after_is_honoured_and_the_cached_token_served(make_agent, keyring, auth_server, fault_proxy):
    proxy = fault_proxy
    agent = proxied_agent(make_agent, proxy)
    agent.login("work")
    rt = keyring.secret_tool_lookup("work", auth_server.issuer)
    agent.remember(rt)
    cached = agent.token("work")
    proxy.set("canned", (429, "application/json", b'{"error":"slow_down"}', [("Retry-After", "120")]))
    r = agent.authctl("token", "work", "--refresh")
    assert r.returncode == 6, r.stderr
    status = agent.account_status("work")
    assert status["last_error"]["code"] == "server_error", status
    posts = len(proxy.forms)

    # The server is back, but asked for 120 s: a caller that would need a refresh (min_valid beyond the token's
    # life) gets the still-valid cached token, and the server is not asked (the default backoff would be ~2 s).
    proxy.set("pass")
    r = agent.authctl("token", "work", "--min-valid", "7200")
    assert r.returncode == 0 and r.stdout.strip() == cached, r.stderr
    assert len(proxy.forms) == posts, "no request before Retry-After"
    reply = json.loads(agent.authctl("status", "--json").stdout)
    assert reply["accounts"][0]["last_error"]["code"] == "server_error"
    assert keyring.secret_tool_lookup("work", auth_server.issuer) == rt, "the refresh token is kept"
    # A forced refresh (the user's explicit wish) still goes through.
    fresh = agent.token("work", "--refresh")
    agent.remember(fresh, keyring.secret_tool_lookup("work", auth_server.issuer))
    assert fresh != cached and auth_server.introspect(fresh)["active"] is True


def test_dns_failure_keeps_the_refresh_token(make_agent, keyring, auth_server):
    agent = make_agent(agent={"http_timeout": 5})
    agent.login("work")
    rt = keyring.secret_tool_lookup("work", auth_server.issuer)
    agent.remember(rt)
    good = agent.config_path.read_text()
    # The same account, whose token endpoint's host name does not resolve (.invalid, RFC 6761).
    agent.stop()
    agent.write_config(render_config(
        {"work": default_account(auth_server.issuer, token_endpoint="https://auth.invalid/o/token/")},
        {"http_timeout": 5}))
    agent.start()
    r = agent.authctl("token", "work")
    assert r.returncode == 6 and "cannot reach https://auth.invalid/o/token/" in r.stderr, r.stderr
    assert agent.account_status("work")["last_error"]["code"] == "server_unreachable"
    assert keyring.secret_tool_lookup("work", auth_server.issuer) == rt, "a DNS failure never costs the sign-in"
    agent.stop()
    agent.write_config(good)
    agent.start()
    token = agent.token("work")
    agent.remember(token, keyring.secret_tool_lookup("work", auth_server.issuer))
    assert auth_server.introspect(token)["active"] is True


def test_a_server_that_is_back_serves_the_next_caller_whatever_the_backoff(make_agent, keyring, auth_server,
                                                                          fault_proxy):
    """Issue 47: 503s in a row grow the proactive backoff (2, 4, 8 s...), but while programs ask, the agent asks the
    server again a second after each failure, one request at a time; once the server answers, the next `authctl token`
    gets a token, instead of failing with "next attempt in N s" until the backoff runs out."""
    proxy = fault_proxy
    agent = proxied_agent(make_agent, proxy)
    agent.login("work")
    agent.remember(keyring.secret_tool_lookup("work", auth_server.issuer))
    agent.restart()  # nothing cached: every caller needs the server
    proxy.set("canned", (503, "text/plain", b"down", []))
    posts = proxy.token_posts()
    for call in range(1, 6):
        r = agent.authctl("token", "work", timeout=30)
        assert r.returncode == 6 and "HTTP 503" in r.stderr, r.stderr
        assert proxy.token_posts() == posts + call, f"call {call} did not ask the server (it waited out the backoff)"
    failures = agent.account_status("work")
    assert failures["last_error"]["code"] == "server_error", failures
    asked = proxy.times_of("/o/token/")[-5:]
    gaps = [later - earlier for earlier, later in zip(asked, asked[1:])]
    assert min(gaps) >= 0.9, f"the server was asked more than once a second: {gaps}"

    # The server answers again; the agent's backoff after five failures is about 32 s.
    proxy.set("pass")
    r = agent.authctl("token", "work", timeout=30)
    assert r.returncode == 0, r.stderr
    token = r.stdout.strip()
    agent.remember(token, keyring.secret_tool_lookup("work", auth_server.issuer))
    assert auth_server.introspect(token)["active"] is True
    assert proxy.token_posts() == posts + 6, "one request served the caller"
    print(f"server back: served on the next call; gaps between the failing requests {[round(g, 2) for g in gaps]} s")
