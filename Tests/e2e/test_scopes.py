"""A token for a subset of the account's scopes, against the real Django OAuth Toolkit server: its own cache entry,
refreshed with the account's one refresh token (`scope=` on the refresh request), narrowed at the server."""
import time
import pytest

pytestmark = pytest.mark.release  # also run against the installed package (scripts/test)


def test_scoped_token_is_narrow_separate_and_cached(make_agent, keyring, auth_server):
    agent = make_agent(work={"scoped_tokens": True})
    agent.login("work")
    agent.remember(keyring.secret_tool_lookup("work", auth_server.issuer))
    default = agent.token("work")
    posts = auth_server.token_posts()

    scoped = agent.token("work", "--scope", "openid")
    assert scoped != default
    assert auth_server.token_posts() == posts + 1, "one refresh for the new (account, scope set) entry"
    info = auth_server.introspect(scoped)
    assert info["active"] is True
    assert info["scope"].split() == ["openid"], f"the server narrowed the token to the asked scope: {info}"
    # A rotated refresh token from the scoped refresh is saved, and it is the only one.
    rotated = keyring.secret_tool_lookup("work", auth_server.issuer)
    assert rotated
    agent.remember(rotated)
    assert keyring.secret_tool_count("work") == 1

    # Cached: the same token again (also for a duplicated scope), with no request to the server.
    assert agent.token("work", "--scope", "openid") == scoped
    assert agent.token("work", "--scope", "openid", "--scope", "openid") == scoped
    assert auth_server.token_posts() == posts + 1, "a cached scoped token must not cause a token request"
    # The default entry is separate.
    assert agent.token("work") == default
    assert auth_server.token_posts() == posts + 1


def test_scope_outside_the_account_is_refused(make_agent, keyring, auth_server):
    agent = make_agent(work={"scoped_tokens": True})
    agent.login("work")
    agent.remember(keyring.secret_tool_lookup("work", auth_server.issuer))
    posts = auth_server.token_posts()
    result = agent.authctl("token", "work", "--scope", "admin")
    assert result.returncode == 8, result
    assert result.stdout == ""
    assert "does not have the scope admin" in result.stderr
    assert "hint:" in result.stderr
    assert auth_server.token_posts() == posts


def test_scoped_requests_are_off_unless_the_account_allows_them(signed_in_agent, auth_server):
    agent = signed_in_agent
    posts = auth_server.token_posts()
    result = agent.authctl("token", "work", "--scope", "openid")
    assert result.returncode == 8, result
    assert "scoped_tokens = true" in result.stderr
    assert auth_server.token_posts() == posts


def test_resource_is_sent_cached_per_resource_and_shown_in_status(make_agent, keyring, auth_server):
    from faultproxy import FaultProxy
    import json

    proxy = FaultProxy(auth_server.base).start()
    try:
        agent = make_agent(work={"token_endpoint": proxy.base + "/o/token/", "scoped_tokens": True})
        agent.login("work")
        agent.remember(keyring.secret_tool_lookup("work", auth_server.issuer))
        default = agent.token("work")
        posts = len(proxy.forms)

        api = "https://api.example.test/v1"
        token = agent.token("work", "--resource", api)
        agent.remember(token, keyring.secret_tool_lookup("work", auth_server.issuer))
        assert token != default
        [(path, form)] = proxy.forms[posts:]
        assert path == "/o/token/" and form["grant_type"] == "refresh_token"
        assert form["resource"] == api, f"the agent sends RFC 8707 `resource` on the refresh: {form}"
        assert "scope" not in form, "a resource alone keeps the granted scopes"
        info = auth_server.introspect(token)
        assert info["active"] is True
        # Django OAuth Toolkit 3.4 implements RFC 8707: the token is restricted to the resource (introspection `aud`).
        print(f"introspection of the resource token: aud={info.get('aud')!r} scope={info.get('scope')!r}")
        assert info.get("aud") in ([api], api), info

        # Cached per resource: no second request; the default entry is separate.
        assert agent.token("work", "--resource", api) == token
        assert agent.token("work") == default
        assert len(proxy.forms) == posts + 1

        status = agent.account_status("work")
        [entry] = status["scoped_tokens"]
        assert entry["resource"] == api and "scopes" not in entry
        assert 0 < entry["expires_in"] <= 3600 and entry["expires_at"] > time.time()
        human = agent.authctl("status")
        assert human.returncode == 0
        assert f"scoped token:  scope (granted), resource {api}: expires in" in human.stdout, human.stdout
        print(json.dumps(entry))

        # Why `scoped_tokens` is off by default, resource edition: Django OAuth Toolkit gives the rotated refresh token
        # the resource too, so the next plain refresh is restricted to it, the old plain token is revoked, and a
        # second resource is refused (RFC 8707 allows this; it means the feature fits only servers that keep the
        # grant's audience on refresh).
        plain = agent.token("work", "--refresh")
        agent.remember(plain, keyring.secret_tool_lookup("work", auth_server.issuer))
        assert auth_server.introspect(plain).get("aud") == [api]
        assert auth_server.introspect(default)["active"] is False
        other = agent.authctl("token", "work", "--resource", "https://other.example.test/")
        assert other.returncode == 8 and "invalid_target" in other.stderr, other.stderr
    finally:
        proxy.stop()
