"""Each preset provider's documented token-endpoint behaviour, reproduced by a named quirk (quirkproxy.py) of the
fault proxy in front of the real Django OAuth Toolkit fixture, met by the real agent and authctl. Every test cites
the documentation its quirk copies.
"""
import json

import pytest

import quirkproxy as q
from conftest import AuthServer, split_stored, stored_token
from faultproxy import FaultProxy
from test_hostile import assert_alive, fault_proxy, proxied_agent  # noqa: F401 (fixture)


def signed_in_with(make_agent, keyring, server, proxy, quirk, **kw):
    """`work` signed in through `proxy` in front of `server`, the proxy playing `quirk` (None: plain forwarding)."""
    proxy.quirk(quirk)
    agent = proxied_agent(make_agent, proxy, server=server, **kw)
    agent.login("work")
    rt, _ = split_stored(keyring.secret_tool_lookup("work", server.issuer))
    assert rt, agent.log()[-2000:]
    agent.remember(rt)
    return agent, rt


def refresh_forms(proxy) -> list[dict]:
    return [form for path, form in proxy.forms if path.startswith(q.TOKEN_PATH) and form.get("grant_type") == "refresh_token"]


def token_json(agent, *args) -> dict:
    result = agent.authctl("token", "work", "--json", *args)
    assert result.returncode == 0, result.stderr
    reply = json.loads(result.stdout)
    agent.remember(reply["access_token"])
    return reply


# ---------------------------------------------------------------------------------------------------------------
# Microsoft identity platform


def test_microsoft_refresh_sends_the_scope_it_requires(make_agent, keyring, auth_server, fault_proxy):
    # https://learn.microsoft.com/en-us/entra/identity-platform/v2-oauth2-auth-code-flow#refresh-the-access-token:
    # `scope` is "required" on the refresh_token grant; without it: HTTP 400 AADSTS900144.
    agent, _ = signed_in_with(make_agent, keyring, auth_server, fault_proxy, q.microsoft_scope_required)
    reply = token_json(agent, "--refresh")
    assert auth_server.introspect(reply["access_token"])["active"] is True
    [form] = refresh_forms(fault_proxy)
    assert form["scope"] == "openid email offline_access", form
    agent.remember(keyring.secret_tool_lookup("work", auth_server.issuer))


@pytest.mark.parametrize("quirk,reason", [
    # https://learn.microsoft.com/en-us/entra/identity-platform/reference-error-codes: "AADSTS700082:
    # ExpiredOrRevokedGrantInactiveToken - The refresh token has expired due to inactivity."
    (q.microsoft_refresh_token_inactive, "expired after a long time without use (AADSTS700082)"),
    # https://learn.microsoft.com/en-us/troubleshoot/entra/entra-id/app-integration/error-code-aadsts50173-grant-expired-revoked:
    # "The provided grant has expired due to it being revoked ... The user might have changed or reset their password."
    (q.microsoft_password_changed, "password was changed or reset (AADSTS50173)"),
], ids=["AADSTS700082", "AADSTS50173"])
def test_microsoft_dead_refresh_token_says_sign_in_again_with_the_reason(make_agent, keyring, auth_server,
                                                                          fault_proxy, quirk, reason):
    agent, _ = signed_in_with(make_agent, keyring, auth_server, fault_proxy, q.microsoft_scope_required)
    fault_proxy.quirk(quirk)
    result = agent.authctl("token", "work", "--refresh")
    assert result.returncode == 4, (result.returncode, result.stderr)
    assert reason in result.stderr, result.stderr
    assert "authctl login work" in result.stderr
    assert keyring.secret_tool_lookup("work", auth_server.issuer) is None
    assert agent.account_status("work")["last_error"]["code"] == "login_required"
    assert_alive(agent)


# ---------------------------------------------------------------------------------------------------------------
# GitHub


def test_github_answers_json_because_the_agent_asks_for_it(make_agent, keyring, auth_server, fault_proxy):
    # https://docs.github.com/en/apps/oauth-apps/building-oauth-apps/authorizing-oauth-apps#2-users-are-redirected-back-to-your-site-by-github:
    # "By default, the response takes the following form: access_token=...&scope=repo%2Cgist&token_type=bearer. You can
    # also receive the response in different formats if you provide the format in the Accept header."
    agent, _ = signed_in_with(make_agent, keyring, auth_server, fault_proxy, q.github_form_unless_json_accepted)
    reply = token_json(agent, "--refresh")
    assert auth_server.introspect(reply["access_token"])["active"] is True
    agent.remember(keyring.secret_tool_lookup("work", auth_server.issuer))


def test_github_form_encoded_answer_is_read_anyway(make_agent, keyring, auth_server, fault_proxy):
    # The same documented default form answer, sent even though the agent asked for JSON (a proxy that drops Accept).
    agent, _ = signed_in_with(make_agent, keyring, auth_server, fault_proxy, q.github_form_encoded_anyway)
    reply = token_json(agent, "--refresh")
    assert auth_server.introspect(reply["access_token"])["active"] is True
    assert reply["scopes"] == ["openid", "email", "offline_access"]
    rotated = keyring.secret_tool_lookup("work", auth_server.issuer)
    agent.remember(rotated)
    assert rotated, "the rotated refresh token from the form answer is stored"


def test_github_errors_with_http_200_are_errors(make_agent, keyring, auth_server, fault_proxy):
    # https://docs.github.com/en/apps/oauth-apps/maintaining-oauth-apps/troubleshooting-oauth-app-access-token-request-errors
    # and .../refreshing-user-access-tokens: `bad_refresh_token` ("The refresh token passed is incorrect or expired.")
    # comes with HTTP 200.
    agent, rt = signed_in_with(make_agent, keyring, auth_server, fault_proxy, q.github_errors_with_http_200)
    assert auth_server.revoke(rt) == 200
    result = agent.authctl("token", "work", "--refresh")
    assert result.returncode == 4, (result.returncode, result.stderr)
    assert "authctl login work" in result.stderr
    assert keyring.secret_tool_lookup("work", auth_server.issuer) is None
    posts = fault_proxy.token_posts()
    assert agent.authctl("token", "work").returncode == 4
    assert fault_proxy.token_posts() == posts, "a dead sign-in is not retried"


def test_github_comma_separated_scopes_are_split(make_agent, keyring, auth_server, fault_proxy):
    # https://docs.github.com/en/apps/oauth-apps/building-oauth-apps/authorizing-oauth-apps: the JSON example answer
    # is {"access_token":"gho_...", "scope":"repo,gist", "token_type":"bearer"}.
    agent, _ = signed_in_with(make_agent, keyring, auth_server, fault_proxy, q.github_comma_separated_scopes)
    assert token_json(agent)["scopes"] == ["openid", "email", "offline_access"]
    assert token_json(agent, "--refresh")["scopes"] == ["openid", "email", "offline_access"]
    agent.remember(keyring.secret_tool_lookup("work", auth_server.issuer))


def test_github_oauth_app_token_is_kept_like_a_sign_in(make_agent, keyring, auth_server, fault_proxy):
    # https://docs.github.com/en/apps/oauth-apps/building-oauth-apps/authorizing-oauth-apps: an OAuth app's answer
    # has no expires_in and no refresh_token; the token does not expire.
    proxy = fault_proxy
    proxy.quirk(q.github_oauth_app_token)
    agent = proxied_agent(make_agent, proxy)
    login = agent.login("work")
    assert "does not expire" in login.stdout, login.stdout
    token = agent.token("work")
    agent.remember(token)
    assert keyring.secret_tool_lookup("work", auth_server.issuer), "the long-lived token is in the keyring"
    account = agent.account_status("work")
    assert account["signed_in"] is True
    assert "access_token_expires_at" not in account and "access_token_expires_in" not in account, account
    posts = proxy.token_posts()
    agent.restart()
    assert agent.token("work") == token, "served after a restart"
    assert agent.token("work", "--refresh") == token
    assert proxy.token_posts() == posts, "nothing to redeem"
    assert auth_server.introspect(token)["active"] is True
    assert agent.account_status("work")["signed_in"] is True


def without_tokens(reply: dict) -> dict:
    """`reply` fit to show in a failed assertion: no token in test output."""
    return {k: v for k, v in reply.items() if k not in ("access_token", "id_token")}


def assert_said_not_to_expire(agent, token: str):
    """Every way the agent hands out a token that does not expire says so, and none carries an expiry."""
    most = 366 * 24 * 3600
    for request in ({"v": 1, "id": 1, "op": "token", "account": "work"},
                    {"v": 1, "id": 2, "op": "token", "account": "work"},  # the fast path's pre-encoded reply
                    {"v": 1, "op": "token", "account": "work", "min_valid": most}):
        [reply] = agent.raw((json.dumps(request) + "\n").encode())
        result = reply["result"]
        same = result.get("access_token") == token
        assert same, "the long-lived token"
        assert result.get("does_not_expire") is True, without_tokens(result)
        assert "expires_in" not in result and "expires_at" not in result, without_tokens(result)
    reply = token_json(agent, "--min-valid", str(most))
    assert reply.get("does_not_expire") is True and "expires_in" not in reply and "expires_at" not in reply, \
        without_tokens(reply)
    result = agent.authctl("token", "work", "--min-valid", str(most))
    assert result.returncode == 0 and "note" not in result.stderr, (result.returncode, result.stderr)
    same = result.stdout.strip() == token
    assert same, "the long-lived token"
    kube = agent.authctl("kube-credential", "work", "--access-token")
    assert kube.returncode == 0, kube.stderr
    credential = json.loads(kube.stdout)
    same = credential["status"].get("token") == token
    assert same, "the long-lived token"
    assert sorted(credential["status"]) == ["token"], "no expirationTimestamp: kubectl keeps it until a 401"
    git = agent.authctl("git-credential", "--account", "work", "get", input="protocol=https\nhost=git.example.com\n\n")
    assert git.returncode == 0, git.stderr
    lines = git.stdout.split("\n")
    same = lines[:2] == ["username=oauth2", f"password={token}"]
    assert same, "the long-lived token"
    assert lines[2:] == ["", ""], "no password_expiry_utc"
    account = agent.account_status("work")
    assert account.get("access_token_does_not_expire") is True, account
    assert "does not expire" in agent.authctl("status").stdout


def test_github_oauth_app_token_is_said_not_to_expire_everywhere(make_agent, keyring, auth_server, fault_proxy):
    # https://docs.github.com/en/apps/oauth-apps/building-oauth-apps/differences-between-github-apps-and-oauth-apps:
    # an OAuth app's token does not expire (its answer has no expires_in), so no consumer is given a date for it.
    fault_proxy.quirk(q.github_oauth_app_token)
    agent = proxied_agent(make_agent, fault_proxy)
    login = agent.authctl("login", "work", "--json", timeout=60)
    assert login.returncode == 0, login.stderr
    signed_in = json.loads(login.stdout)
    assert signed_in.get("access_token_does_not_expire") is True and "access_token_expires_at" not in signed_in, signed_in
    token = agent.token("work")
    agent.remember(token)
    assert_said_not_to_expire(agent, token)
    agent.restart()
    assert_said_not_to_expire(agent, token)


def test_github_app_expiring_user_token_and_its_dead_refresh_token(make_agent, keyring, auth_server, fault_proxy):
    # https://docs.github.com/en/apps/creating-github-apps/authenticating-with-a-github-app/refreshing-user-access-tokens:
    # "The user access token expires after eight hours, and the refresh token expires after six months." The
    # answer carries "expires_in": "28800" and "refresh_token_expires_in": "15811200"; a dead refresh token is
    # `bad_refresh_token` with HTTP 200.
    def github_app(method, path, headers, body, forward):
        return q.github_errors_with_http_200(
            method, path, headers, body, lambda: q.github_app_expiring_user_tokens(method, path, headers, body, forward))
    agent, _ = signed_in_with(make_agent, keyring, auth_server, fault_proxy, github_app)
    first = token_json(agent)
    assert 28700 < first["expires_in"] <= 28800, first["expires_in"]
    second = token_json(agent, "--refresh")
    assert 28700 < second["expires_in"] <= 28800
    rt, _ = split_stored(keyring.secret_tool_lookup("work", auth_server.issuer))
    agent.remember(rt)
    assert auth_server.revoke(rt) == 200
    result = agent.authctl("token", "work", "--refresh")
    assert result.returncode == 4, (result.returncode, result.stderr)
    assert keyring.secret_tool_lookup("work", auth_server.issuer) is None
    assert agent.account_status("work")["signed_in"] is False


# ---------------------------------------------------------------------------------------------------------------
# Google


@pytest.fixture
def google_like_server(tmp_path):
    """The fixture keeping refresh tokens on refresh (AS_ROTATE_REFRESH_TOKEN=0), with Google's 3599 s tokens."""
    server = AuthServer(tmp_path / "authserver-google", lifetime=3599, extra_env={"AS_ROTATE_REFRESH_TOKEN": "0"})
    server.start()
    proxy = FaultProxy(server.base).start()
    yield server, proxy
    proxy.stop()
    server.stop()


def test_google_refresh_without_a_new_refresh_token_keeps_the_old_one(make_agent, keyring, google_like_server):
    # https://developers.google.com/identity/protocols/oauth2/native-app#offline: the refresh answer is
    # {"access_token": "...", "expires_in": 3920, "scope": "...", "token_type": "Bearer"}: no refresh_token.
    server, proxy = google_like_server
    agent, rt = signed_in_with(make_agent, keyring, server, proxy, q.google_refresh_without_refresh_token)
    for _ in range(3):
        reply = token_json(agent, "--refresh")
        assert 3500 < reply["expires_in"] <= 3599
        assert server.introspect(reply["access_token"])["active"] is True
        assert keyring.secret_tool_lookup("work", server.issuer) == rt, "the sign-in's refresh token is kept"
    agent.restart()
    assert server.introspect(token_json(agent, "--refresh")["access_token"])["active"] is True
    assert keyring.secret_tool_count("work") == 1


# ---------------------------------------------------------------------------------------------------------------
# GitLab


def test_gitlab_rotation_the_agent_never_sends_a_refresh_token_twice(make_agent, keyring, auth_server, fault_proxy):
    # https://docs.gitlab.com/api/oauth2/: a refresh "Invalidates the existing access_token and refresh_token. Sends
    # new tokens in the response." The fixture rotates with no grace period, so a re-sent old token would fail.
    recorder = q.GitLabRotationRevokesOld()
    agent, rt = signed_in_with(make_agent, keyring, auth_server, fault_proxy, recorder)
    expected = [q.digest(stored_token(rt))]
    for round_ in range(4):
        if round_ == 2:
            agent.restart()  # the rotated token survives a restart: it was stored before it was used
        token = token_json(agent, "--refresh")["access_token"]
        assert auth_server.introspect(token)["active"] is True
        stored = keyring.secret_tool_lookup("work", auth_server.issuer)
        agent.remember(stored)
        assert keyring.secret_tool_count("work") == 1
        expected.append(q.digest(stored_token(stored)))
    assert recorder.sent == expected[:-1], "each refresh sent exactly the token the previous one stored"
    assert len(set(recorder.sent)) == len(recorder.sent), "a refresh token was sent twice"


# ---------------------------------------------------------------------------------------------------------------
# A rotating refresh whose answer never arrives


@pytest.fixture
def reuse_window_server(tmp_path):
    """The fixture with a 60 s reuse window for a rotated-out refresh token (AS_REFRESH_GRACE_SECONDS)."""
    server = AuthServer(tmp_path / "authserver-grace", extra_env={"AS_REFRESH_GRACE_SECONDS": "60"})
    server.start()
    proxy = FaultProxy(server.base).start()
    yield server, proxy
    proxy.stop()
    server.stop()


def lose_one_rotation(agent, proxy, keyring, server, rt):
    """A forced refresh that the server acts on (it rotates) but whose answer is lost on the way back: the agent
    must treat it as an outage and keep the refresh token it sent, the only one it has."""
    proxy.set("hang_after")
    client = agent.authctl_popen("token", "work", "--refresh")
    assert proxy.reached.wait(20), "the refresh never reached the proxy"
    proxy.release.set()  # drop the connection: the rotated pair never reaches the agent
    out, err = client.communicate(timeout=60)
    assert client.returncode != 0 and not out.strip(), (client.returncode, out)
    assert "keeps your sign-in" in err, err
    assert keyring.secret_tool_lookup("work", server.issuer) == rt, "the unanswered refresh cost the stored token"
    proxy.set("pass")


def test_lost_rotation_answer_is_recovered_inside_the_reuse_window(make_agent, keyring, reuse_window_server):
    # Servers with a reuse window answer a retry with the rotated-out token instead of revoking the sign-in:
    # Auth0's "Refresh Token Reuse Interval" (only the generation just before the current one), Atlassian's
    # 10-minute leeway "to allow multiple retries in case the client doesn't get the new token pair"
    # (https://community.developer.atlassian.com/t/the-old-access-token-will-be-revoked-during-the-refresh-token-exchange/83103),
    # and Django OAuth Toolkit's REFRESH_TOKEN_GRACE_PERIOD_SECONDS, which the fixture uses here.
    server, proxy = reuse_window_server
    agent, rt = signed_in_with(make_agent, keyring, server, proxy, None)
    lose_one_rotation(agent, proxy, keyring, server, rt)

    posts = proxy.token_posts()
    retried = token_json(agent, "--refresh")
    assert proxy.token_posts() - posts == 1
    assert server.introspect(retried["access_token"])["active"] is True
    rotated = keyring.secret_tool_lookup("work", server.issuer)
    assert rotated and rotated != rt, "the retry's answer was not stored"
    agent.remember(rotated)
    assert keyring.secret_tool_count("work") == 1

    # The stored successor is the live sign-in from now on (the window only covered the lost answer).
    again = token_json(agent, "--refresh")
    assert server.introspect(again["access_token"])["active"] is True
    assert keyring.secret_tool_lookup("work", server.issuer) not in (rt, rotated)
    assert_alive(agent)


def test_lost_rotation_answer_without_a_reuse_window_asks_for_sign_in_once(make_agent, keyring, auth_server,
                                                                              fault_proxy):
    # GitLab: the old refresh token is invalidated by the refresh itself (https://docs.gitlab.com/api/oauth2/), so a
    # lost answer leaves the agent a dead token. The next refresh learns it (invalid_grant) and says "sign in
    # again"; it is asked once, not on every request.
    agent, rt = signed_in_with(make_agent, keyring, auth_server, fault_proxy, None)
    lose_one_rotation(agent, fault_proxy, keyring, auth_server, rt)

    posts = fault_proxy.token_posts()
    result = agent.authctl("token", "work", "--refresh")
    assert result.returncode == 4, (result.returncode, result.stderr)
    assert "authctl login work" in result.stderr, result.stderr
    assert fault_proxy.token_posts() - posts == 1
    for args in (["token", "work"], ["token", "work", "--refresh"]):
        assert agent.authctl(*args).returncode == 4, args
    assert fault_proxy.token_posts() - posts == 1, "a dead refresh token was sent again"
    assert keyring.secret_tool_count("work") == 0
    agent.login("work")
    assert agent.authctl("token", "work").returncode == 0
    assert_alive(agent)
