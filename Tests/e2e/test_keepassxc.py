"""KeePassXC as the Secret Service (issue 36 §1), headless: a real KeePassXC 2.7 under Xvfb on a private session bus
(Tests/e2e/keepassxc.py), the real agent and authctl, the real authorization server.

What KeePassXC does differently from the GNOME keyring, and what each test holds the agent to:
- a locked database: items are hidden (as in the GNOME keyring), but a search or a write waits on KeePassXC's
  unlock dialog instead of failing; the agent asks the collection's state first, so every request answers
  `keyring_locked` at once, with KeePassXC's advice, and a sign-in is refused before the browser is started;
- a closed database (no database open): there is no `default` collection at all, and a write waits on the
  new-database wizard; for KeePassXC that is "locked" too (the items are hidden, not absent), never "not signed in".
"""
from __future__ import annotations

import json
import shutil
import time

import pytest

from conftest import short_tmpdir
from keepassxc import KeePassXCBus

# A keyring answer that waited on one of KeePassXC's dialogs would take the agent's keyring timeout (20 s).
PROMPTLY = 5.0


@pytest.fixture
def keepassxc(request, tmp_path_factory):
    base = short_tmpdir("aa-kpx-")
    bus = KeePassXCBus(base)
    try:
        bus.start()
        yield bus
    finally:
        try:
            bus.stop()
        finally:
            report = getattr(request.node, "rep_call", None)
            if report is not None and report.failed and (base / "keepassxc.log").exists():
                kept = tmp_path_factory.mktemp("failed-keepassxc")
                shutil.copy(base / "keepassxc.log", kept / "keepassxc.log")
                print(f"KeePassXC log kept: {kept / 'keepassxc.log'}")
            shutil.rmtree(base, ignore_errors=True)


def timed(agent, *args):
    started = time.monotonic()
    result = agent.authctl(*args, timeout=60)
    return result, time.monotonic() - started


def doctor_keyring(agent) -> tuple[int, dict]:
    result = agent.authctl("doctor", "--json", timeout=60)
    report = json.loads(result.stdout)
    return result.returncode, next(c for c in report["checks"] if c["check"] == "keyring" and not c.get("account"))


def signed_in(agent, keepassxc, auth_server) -> str:
    agent.login("work")
    rt = keepassxc.secret_tool_lookup("work", auth_server.issuer)
    assert rt, "no refresh token in the KeePassXC database after login"
    agent.remember(rt)
    return rt


def test_sign_in_refresh_restart_and_logout(make_agent, keepassxc, auth_server):
    # A sign-in lifetime, so that every write carries the `valid_until` attribute too.
    agent = make_agent(bus=keepassxc, work={"sign_in_lifetime": "90d", "sign_in_lifetime_kind": "idle"})
    status = agent.status_json()["agent"]
    assert status["keyring"] == "available", status
    assert status["keyring_service"].endswith("/keepassxc"), status
    code, check = doctor_keyring(agent)
    assert check["status"] == "ok" and "/keepassxc" in check["message"], check

    rt = signed_in(agent, keepassxc, auth_server)
    access = agent.token("work")
    assert auth_server.introspect(access)["active"] is True

    refreshed = agent.token("work", "--refresh")
    assert refreshed != access and auth_server.introspect(refreshed)["active"] is True
    rotated = keepassxc.secret_tool_lookup("work", auth_server.issuer)
    assert rotated and rotated != rt, "the rotated refresh token was not written to the database"
    agent.remember(rotated)
    assert keepassxc.secret_tool_count("work") == 1, "the rotation made a second item instead of updating the one"
    until = keepassxc.secret_tool_attributes("work")[0].get("attribute.valid_until")
    assert until and until.isdigit(), "the sign-in's date is not on the item"

    agent.restart()
    after = agent.token("work")  # from the refresh token in the database: access tokens live in memory only
    assert auth_server.introspect(after)["active"] is True
    latest = keepassxc.secret_tool_lookup("work", auth_server.issuer)
    agent.remember(latest)
    stored_until = keepassxc.secret_tool_attributes("work")[0].get("attribute.valid_until")
    assert agent.account_status("work").get("sign_in_valid_until") == int(stored_until), "the date was not read back"

    result = agent.authctl("logout", "work")
    assert result.returncode == 0 and "revoked" in result.stdout, (result.stdout, result.stderr)
    assert keepassxc.secret_tool_count("work") == 0
    assert auth_server.refresh_token_works(latest) is False, "the refresh token still works after logout"
    assert agent.authctl("token", "work").returncode == 4


def test_confirm_access_asks_a_restarted_agent_and_its_answer_serves_the_token(make_agent, auth_server):
    """KeePassXC's "Confirm when passwords are retrieved by clients" (on by default) shows the items as locked to a
    client it has not asked about: after a restart the agent must ask (KeePassXC's Access Request dialog) and serve
    the token once the person allows it, not take the locked item for no sign-in."""
    bus = KeePassXCBus(short_tmpdir("aa-kpx-"), confirm_access=True)
    bus.start()
    try:
        agent = make_agent(bus=bus)
        agent.login("work")
        agent.restart()
        waiting = agent.authctl_popen("token", "work")
        bus.allow_access()
        out, err = waiting.communicate(timeout=60)
        assert waiting.returncode == 0, (waiting.returncode, err)
        agent.remember(out.strip())
        assert auth_server.introspect(out.strip())["active"] is True
        refreshed = agent.token("work", "--refresh")  # the rotation is written to the item this client was allowed
        assert refreshed != out.strip()
        result = agent.authctl("logout", "work")
        assert result.returncode == 0 and "revoked" in result.stdout, (result.stdout, result.stderr)
        assert agent.authctl("token", "work").returncode == 4
    finally:
        bus.stop()


def test_locked_database_is_reported_at_once_and_a_sign_in_is_refused_before_the_browser(
        make_agent, keepassxc, auth_server):
    agent = make_agent(bus=keepassxc)
    rt = signed_in(agent, keepassxc, auth_server)
    keepassxc.lock()
    agent.restart()  # the refresh token must now come from the locked database

    result, took = timed(agent, "token", "work")
    assert result.returncode == 5, (result.returncode, result.stderr)
    assert took < PROMPTLY, f"the token request waited {took:.1f} s (on KeePassXC's unlock dialog?)"
    assert "KeePassXC database is locked" in result.stderr, result.stderr
    assert "hint: unlock the database in KeePassXC" in result.stderr, result.stderr
    assert "authctl login" not in result.stderr, "a locked database must not look like 'not signed in'"

    status = agent.status_json()
    assert status["agent"]["keyring"] == "locked" and status["agent"]["keyring_service"].endswith("/keepassxc")
    assert next(a for a in status["accounts"] if a["name"] == "work").get("signed_in") is None
    text = agent.authctl("status").stdout
    assert "keyring: locked" in text and "unlock the database in KeePassXC" in text and "Seahorse" not in text, text

    browsers = agent.browser_runs()
    result, took = timed(agent, "login", "work")
    assert result.returncode == 5 and took < PROMPTLY, (result.returncode, took, result.stderr)
    assert "hint: unlock the database in KeePassXC" in result.stderr, result.stderr
    assert agent.browser_runs() == browsers, "the browser was started for a sign-in that could not be stored"

    code, check = doctor_keyring(agent)
    assert code == 1 and check["status"] == "fail" and "unlock the database in KeePassXC" in check["hint"], check
    assert keepassxc.state() == "locked", "the agent unlocked or closed the database (a dialog was answered?)"

    keepassxc.unlock()
    token = agent.token("work")
    assert auth_server.introspect(token)["active"] is True
    stored = keepassxc.secret_tool_lookup("work", auth_server.issuer)
    assert stored and stored != rt, "the refresh after the unlock did not write the rotated token"
    agent.remember(stored)
    assert agent.status_json()["agent"]["keyring"] == "available"


def test_closed_database_is_locked_not_signed_out_and_never_waits_on_the_wizard(make_agent, keepassxc, auth_server):
    agent = make_agent(bus=keepassxc)
    rt = signed_in(agent, keepassxc, auth_server)
    keepassxc.close()
    agent.restart()

    result, took = timed(agent, "token", "work")
    assert result.returncode == 5 and took < PROMPTLY, (result.returncode, took, result.stderr)
    assert "no database open" in result.stderr and "authctl login" not in result.stderr, result.stderr
    assert "KeePassXC" in result.stderr.split("hint:", 1)[1], result.stderr

    status = agent.status_json()["agent"]
    assert status["keyring"] == "locked", status

    browsers = agent.browser_runs()
    result, took = timed(agent, "login", "work")
    assert result.returncode == 5 and took < PROMPTLY, (result.returncode, took, result.stderr)
    assert "no database open" in result.stderr, result.stderr
    assert agent.browser_runs() == browsers, "the browser was started for a sign-in that could not be stored"
    assert keepassxc.state() == "closed"

    keepassxc.unlock()  # opens it again
    token = agent.token("work")
    assert auth_server.introspect(token)["active"] is True
    stored = keepassxc.secret_tool_lookup("work", auth_server.issuer)
    assert stored and stored != rt
    agent.remember(stored)
