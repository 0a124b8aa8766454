"""Configuration changes while the agent runs (issue 19, section 2 (c) and (d)): `systemctl --user reload` and
`authctl reload` re-read config.toml without losing the signed-in account's cached token; an invalid new file is
refused and the old configuration keeps serving; a second `make install` restarts the running agent."""
import json
import re

import pytest

from conftest import BIN_INSIDE, CONFIG, REPO_INSIDE, ensure_running, write_config
from e2e_helpers import default_account, render_config, wait_for


def accounts(user) -> list[str]:
    result = user.run("authctl status --json", timeout=15)
    assert result.returncode == 0, f"authctl status --json failed ({result.returncode}): {result.stderr.strip()}"
    return sorted(a["name"] for a in json.loads(result.stdout)["accounts"])


def token(user) -> str:
    result = user.run("authctl token work", timeout=30)
    assert result.returncode == 0, f"authctl token failed ({result.returncode}): {result.stderr.strip()}"
    return result.stdout.strip()


class Running(dict):
    """The running agent's pid, its cached token and the server's token-request count. Its repr hides the token:
    pytest prints fixture values in long tracebacks."""

    def __repr__(self):
        return f"<Running pid={self['pid']}>"


@pytest.fixture
def running(user, installed, auth_server):
    """A running agent with account `work` signed in and its access token cached; the base config afterwards."""
    pid = ensure_running(user)
    if not user.keyring_items(account="work", issuer=auth_server.issuer):
        assert user.run("authctl login work", timeout=60).returncode == 0, "sign-in for the reload tests failed"
    cached = token(user)
    yield Running(pid=pid, token=cached, token_posts=auth_server.token_posts())
    write_config(user, auth_server)
    user.check("systemctl --user restart auth-agent.service")


def assert_token_kept(user, auth_server, running):
    assert token(user) == running["token"], "the cached access token was lost"
    assert auth_server.token_posts() == running["token_posts"], "the agent went back to the token endpoint"


def test_systemctl_reload_rereads_the_config(user, auth_server, running):
    write_config(user, auth_server, {"work": default_account(auth_server.issuer),
                                     "personal": default_account(auth_server.issuer)})
    result = user.systemctl("reload", "auth-agent.service")
    assert result.returncode == 0, f"systemctl --user reload failed: {result.stderr.strip()}"
    wait_for(lambda: "personal" in accounts(user), 5, "account `personal` after the reload", interval=0.2)
    assert user.main_pid() == running["pid"], "reload restarted the agent"
    assert_token_kept(user, auth_server, running)


def test_authctl_reload_rereads_the_config(user, auth_server, running):
    write_config(user, auth_server, {"work": default_account(auth_server.issuer),
                                     "other": default_account(auth_server.issuer)})
    result = user.run("authctl reload", timeout=15)
    assert result.returncode == 0, f"authctl reload failed ({result.returncode}): {result.stderr.strip()}"
    assert accounts(user) == ["other", "work"]
    assert user.main_pid() == running["pid"], "reload restarted the agent"
    assert_token_kept(user, auth_server, running)


def test_invalid_config_is_refused_by_reload_and_the_old_one_keeps_serving(user, auth_server, running):
    lines = render_config({"work": default_account(auth_server.issuer),
                           "broken": default_account(auth_server.issuer)}, {"log_level": "debug"}).splitlines()
    lines.insert(2, 'unterminated = "no closing quote')
    user.write_file(CONFIG, "\n".join(lines) + "\n")
    result = user.run("authctl reload", timeout=15)
    assert result.returncode != 0, "authctl reload accepted an invalid config.toml"
    assert re.search(r"config\.toml:3\b", result.stderr), f"no file:line in: {result.stderr.strip()}"
    assert accounts(user) == ["work"], "the old configuration no longer serves"
    assert user.main_pid() == running["pid"]
    assert_token_kept(user, auth_server, running)


def test_second_make_install_restarts_a_running_agent(user, running):
    user.check(f"make -C {REPO_INSIDE} install BUILT={BIN_INSIDE}", timeout=120)
    wait_for(lambda: user.main_pid() not in (0, running["pid"]), 10, "a new agent after the second make install",
             interval=0.2)
    assert user.is_active("auth-agent.service") == "active"
