"""A token endpoint that refuses a refresh with a 4xx other than 408/429 and no OAuth error body (an empty 400, a
401, an HTML page): the sign-in is dead. The user learns it once (`login_required` with the server's status, one
desktop notification), the refused refresh token is dropped as for `invalid_grant` (docs/SECURITY.md), and later
requests are answered from the keyring, not by asking the server again. An outage (5xx, 408, a dropped connection)
never costs the refresh token. Real agent, keyring and Django fixture; the fault proxy plays the refusing server.
"""
import pytest

from conftest import wait_for
from test_hostile import assert_alive, fault_proxy, proxied_agent  # noqa: F401 (fixture)
from test_notifications import notification_server, notifications  # noqa: F401 (fixture)


def signed_in(make_agent, keyring, auth_server, proxy):
    agent = proxied_agent(make_agent, proxy)
    agent.login("work")
    rt = keyring.secret_tool_lookup("work", auth_server.issuer)
    assert rt
    agent.remember(rt)
    return agent, rt


@pytest.mark.parametrize("status,content_type,body", [
    (400, "text/plain", b""),
    (401, "text/html", b"<html><body><h1>401 Unauthorized</h1></body></html>"),
    (403, "text/html; charset=utf-8", b"<!DOCTYPE html><title>Access denied</title>"),
])
def test_bodyless_client_error_means_sign_in_needed_once(make_agent, keyring, auth_server, fault_proxy,
                                                         notification_server, status, content_type, body):
    proxy = fault_proxy
    agent, rt = signed_in(make_agent, keyring, auth_server, proxy)
    proxy.set("canned", (status, content_type, body))
    before = proxy.token_posts()

    result = agent.authctl("token", "work", "--refresh")
    assert result.returncode == 4, (result.returncode, result.stderr)
    assert result.stdout == ""
    assert f"HTTP {status}" in result.stderr, result.stderr
    assert "authctl login work" in result.stderr, result.stderr
    assert "keeps your sign-in" not in result.stderr  # not the outage hint
    account = agent.account_status("work")
    assert account["last_error"]["code"] == "login_required"
    assert f"HTTP {status}" in account["last_error"]["message"]
    assert account["signed_in"] is False
    assert keyring.secret_tool_lookup("work", auth_server.issuer) is None, "the refused refresh token is still stored"

    # No retry storm: later requests (plain and forced) learn it from the keyring, not from the server.
    for args in (["token", "work"], ["token", "work", "--refresh"], ["token", "work", "--min-valid", "60"]):
        assert agent.authctl(*args).returncode == 4, args
    assert proxy.token_posts() - before == 1, proxy.hits

    # One desktop notification, whatever the number of failing requests.
    wait_for(lambda: len(notifications(notification_server)) >= 1, 10, "the sign-in notification")
    with pytest.raises(AssertionError):
        wait_for(lambda: len(notifications(notification_server)) > 1, 1, "a second notification")
    [shown] = notifications(notification_server)
    assert shown["summary"] == "Sign in to work"
    assert_alive(agent)

    # Signing in again recovers.
    proxy.set("pass")
    agent.login("work")
    agent.remember(keyring.secret_tool_lookup("work", auth_server.issuer))
    assert auth_server.introspect(agent.token("work", "--refresh"))["active"] is True


def test_outages_keep_the_refresh_token(make_agent, keyring, auth_server, fault_proxy):
    proxy = fault_proxy
    agent, rt = signed_in(make_agent, keyring, auth_server, proxy)
    outages = [("canned", (503, "text/html", b"<html>Service Unavailable</html>")),
               ("canned", (502, "text/plain", b"")),
               ("canned", (408, "text/plain", b"")),
               ("drop", None)]
    for mode, canned in outages:
        proxy.set(mode, canned)
        result = agent.authctl("token", "work", "--refresh")
        assert result.returncode == 6, (mode, canned, result.returncode, result.stderr)
        assert "authctl login" not in result.stderr
        assert agent.account_status("work")["last_error"]["code"] in ("server_error", "server_unreachable")
        assert keyring.secret_tool_lookup("work", auth_server.issuer) == rt, f"{mode} {canned}: the refresh token was dropped"
    proxy.set("pass")
    token = agent.token("work", "--refresh")
    assert auth_server.introspect(token)["active"] is True
    agent.remember(keyring.secret_tool_lookup("work", auth_server.issuer))
