"""A server whose access tokens live 30 s (the Django fixture with AS_ACCESS_TOKEN_LIFETIME=30), and every
integration that asks for 60 s: `authctl token --min-valid 60`, `authctl git-credential` (through real git) and
`authctl kube-credential` (ID token and access token). `min_valid` means "fresh enough, or the freshest the server
will give": each gets a working token with its real expiry, and many requests do not cause a refresh each."""
import json
import time

import pytest

from conftest import AuthServer, wait_for
from test_integrations import (SHA, assert_exec_credential_v1, credential_get, git_server, helper, parse_basic,
                               run_git, unix_time)

LIFETIME = 30


@pytest.fixture
def short_auth_server(tmp_path):
    server = AuthServer(tmp_path / "authserver-30s", lifetime=LIFETIME)
    server.start()
    yield server
    server.stop()


@pytest.fixture
def short_agent(make_agent, keyring, short_auth_server):
    agent = make_agent(server=short_auth_server)
    agent.login("work")
    rt = keyring.secret_tool_lookup("work", short_auth_server.issuer)
    assert rt
    agent.remember(rt)
    return agent


def test_token_min_valid_60_gets_the_30_s_token_with_its_real_expiry(short_agent, short_auth_server):
    agent, server = short_agent, short_auth_server
    posts = server.token_posts()
    result = agent.authctl("token", "work", "--min-valid", "60", "--json")
    assert result.returncode == 0, result.stderr
    reply = json.loads(result.stdout)
    agent.remember(reply["access_token"])
    assert 0 < reply["expires_in"] <= LIFETIME, reply["expires_in"]
    assert reply["expires_at"] <= time.time() + LIFETIME + 1
    assert server.introspect(reply["access_token"])["active"] is True
    # It says so, on stderr: stdout stays the token alone, for $(authctl token ...).
    assert f"valid for {reply['expires_in']} s, less than --min-valid 60" in result.stderr, result.stderr
    # Twenty more callers within the token's fresh half share it (the fast path and the broker agree).
    for _ in range(20):
        again = agent.authctl("token", "work", "--min-valid", "60")
        assert again.returncode == 0, again.stderr
    assert server.token_posts() - posts <= 2, f"{server.token_posts() - posts} token requests for 21 callers"

    # Later callers get the next token once this one is past its early-refresh moment.
    def next_token():
        out = agent.authctl("token", "work", "--min-valid", "60")
        assert out.returncode == 0, out.stderr
        return out.stdout.strip() if out.stdout.strip() != reply["access_token"] else None
    fresh = wait_for(next_token, LIFETIME + 10, "a newer token", interval=0.5)
    agent.remember(fresh)
    assert server.introspect(fresh)["active"] is True


def test_git_credential_and_real_git_against_30_s_tokens(short_agent, short_auth_server):
    agent, server = short_agent, short_auth_server
    result = credential_get(agent)  # the helper's default --min-valid is 60
    assert result.returncode == 0, result.stderr
    fields = dict(line.split("=", 1) for line in result.stdout.strip().splitlines())
    agent.remember(fields["password"])
    assert server.introspect(fields["password"])["active"] is True
    assert int(fields["password_expiry_utc"]) <= time.time() + LIFETIME + 1, "the token's real expiry"

    with git_server(server) as git:
        ls = run_git(agent, "-c", "credential.helper=", "-c", f"credential.{git.base}.helper={helper()}",
                     "ls-remote", f"{git.base}/repo.git")
        assert ls.returncode == 0, ls.stderr
        assert f"{SHA}\trefs/heads/main" in ls.stdout
        user, token = parse_basic(git.authorizations()[0])
    agent.remember(token)
    assert user == "oauth2"


@pytest.mark.parametrize("extra", [[], ["--access-token"]])
def test_kube_credential_against_30_s_tokens(short_agent, short_auth_server, extra):
    agent = short_agent
    result = agent.authctl("kube-credential", "work", *extra)  # asks for 60 s
    assert result.returncode == 0, result.stderr
    obj = json.loads(result.stdout)
    assert_exec_credential_v1(obj)
    agent.remember(obj["status"]["token"])
    expires = unix_time(obj["status"]["expirationTimestamp"])
    assert expires > time.time()
    if extra:
        assert expires <= time.time() + LIFETIME + 1, "the access token's real expiry"
        assert short_auth_server.introspect(obj["status"]["token"])["active"] is True
