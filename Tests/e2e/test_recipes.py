"""The recipes of docs/INTEGRATIONS.md, driven through the real programs: curl with `authctl token --header` against
a server that checks the bearer token at the authorization server's introspection endpoint, and one git helper line
for several hosts. The mail recipes are in test_mail.py (real clients against a real Dovecot)."""
from __future__ import annotations

import json
import subprocess

import pytest

from conftest import bin_dir, default_account
from test_integrations import CheckingServer, git_server, parse_basic, run_git

pytestmark = pytest.mark.release  # also run against the installed package (scripts/test)



def authctl_path() -> str:
    return str(bin_dir() / "authctl")


# ----------------------------------------------------------------------------------------------------------------
# curl


def test_curl_takes_the_header_from_authctl_on_stdin(signed_in_agent, auth_server):
    def check(header):
        return header.startswith("Bearer ") and auth_server.introspect(header[7:]).get("active") is True

    with CheckingServer(check, {"/api/me": ("application/json", b'{"ok":true}\n')}, 'Bearer realm="api"') as server:
        # The docs/INTEGRATIONS.md line, as a user types it.
        line = f"'{authctl_path()}' token work --header | curl -sS --fail -H @- {server.base}/api/me"
        result = subprocess.run(["sh", "-c", line], env=signed_in_agent.env, capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        assert result.stdout == '{"ok":true}\n'
        assert len(server.authorizations()) == 1
        token = server.authorizations()[0].removeprefix("Bearer ")
    signed_in_agent.remember(token)
    assert token == signed_in_agent.token("work")


# ----------------------------------------------------------------------------------------------------------------
# git: one helper line for several hosts (git_hosts)


def test_one_git_helper_line_serves_several_hosts_through_git_hosts(make_agent, auth_server):
    with git_server(auth_server) as first, git_server(auth_server) as second, git_server(auth_server) as unlisted:
        host = lambda server: server.base.removeprefix("http://")
        agent = make_agent(accounts={
            "work": default_account(auth_server.issuer, git_hosts=[host(first)]),
            "personal": default_account(auth_server.issuer, git_hosts=[f"{host(second)}/repo.git", "example.invalid"]),
        })
        agent.login("work")
        agent.login("personal")
        listed = {a["name"]: a.get("git_hosts") for a in json.loads(agent.authctl("accounts", "--json").stdout)["accounts"]}
        assert listed == {"work": [host(first)], "personal": [f"{host(second)}/repo.git", "example.invalid"]}
        helper = f"!'{authctl_path()}' git-credential"
        common = ["-c", "credential.helper=", "-c", f"credential.helper={helper}", "-c", "credential.useHttpPath=true"]
        for server in (first, second):
            result = run_git(agent, *common, "ls-remote", f"{server.base}/repo.git")
            assert result.returncode == 0, result.stderr
        missing = run_git(agent, *common, "ls-remote", f"{unlisted.base}/repo.git")
        assert missing.returncode != 0
        assert f"authctl: no account lists {host(unlisted)}/repo.git in its git_hosts" in missing.stderr
        # git decodes the URL's path before it asks the helper: an escape sequence in a repository URL (a submodule,
        # a link someone sent) reaches the helper's message, and must not reach the terminal as one.
        hostile = run_git(agent, *common, "ls-remote", f"{unlisted.base}/%1b%5d0;owned%07/repo.git")
        assert hostile.returncode != 0
        assert "\x1b" not in hostile.stderr and "\x07" not in hostile.stderr, repr(hostile.stderr)
        assert f"no account lists {host(unlisted)}/\\u{{1B}}]0;owned\\u{{7}}/repo.git" in hostile.stderr, hostile.stderr
        assert not unlisted.authorizations(), "no token goes to a host no account lists"
        tokens = {name: agent.token(name) for name in ("work", "personal")}
        assert parse_basic(first.authorizations()[-1])[1] == tokens["work"]
        assert parse_basic(second.authorizations()[-1])[1] == tokens["personal"]
