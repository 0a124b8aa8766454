"""Sign-ins that end while nobody is looking: the server's `refresh_token_expires_in` (a quirk of the fault proxy in
front of the real Django OAuth Toolkit fixture, as GitHub Apps send it) or the configured `sign_in_lifetime` becomes
"sign-in valid until" in `authctl status`, is kept in the real keyring item and read back after a restart, moves
with a refresh, and a short one warns on the (fake) desktop notification server, writes a journal line, and then
reads as needing a sign-in without the refresh token being deleted."""
import json
import re
import subprocess
import time

import quirkproxy as q
from conftest import split_stored, wait_for
from test_hostile import assert_alive, fault_proxy, proxied_agent  # noqa: F401 (fixture)
from test_notifications import notification_server, notifications  # noqa: F401 (fixture)

SIX_MONTHS = 15811200  # GitHub's example value


def stored(keyring, auth_server):
    """The item's secret, which must hold no date, and its `valid_until` attribute (Unix seconds)."""
    secret = keyring.secret_tool_lookup("work", auth_server.issuer)
    date_inside = secret is not None and ("valid_until" in secret or "warned_at" in secret)
    assert not date_inside, "no date inside the secret"  # (a bool: a failure must not print the token)
    [item] = keyring.secret_tool_attributes("work")
    until = item.get("attribute.valid_until")
    return secret, int(until) if until is not None else None


def test_server_lifetime_is_shown_kept_in_the_keyring_read_back_after_a_restart_and_moved_by_a_refresh(
        make_agent, keyring, auth_server, fault_proxy):
    lifetime = {"value": SIX_MONTHS}
    fault_proxy.quirk(q.refresh_token_lifetime(lifetime))
    agent = proxied_agent(make_agent, fault_proxy)
    before = int(time.time())
    agent.login("work")
    after = int(time.time())
    rt, kept = stored(keyring, auth_server)
    agent.remember(rt)
    assert before + SIX_MONTHS - 1 <= kept <= after + SIX_MONTHS + 1, kept

    status = agent.account_status("work")
    assert status["sign_in_valid_until"] == kept, status
    human = agent.authctl("status")
    assert human.returncode == 0, human.stderr
    assert re.search(r"sign-in:\s+valid until \d{4}-\d\d-\d\d \d\d:\d\d \S+ \(in 18[23] days\)", human.stdout), human.stdout
    assert rt not in human.stdout and rt not in json.dumps(status)
    # The D-Bus GetStatus carries the same field.
    bus = subprocess.run(["gdbus", "call", "--session", "--dest", "dev.authagent.Agent", "--object-path",
                          "/dev/authagent/Agent1", "--method", "dev.authagent.Agent1.GetStatus"],
                         env={**agent.env}, capture_output=True, text=True, timeout=15)
    assert bus.returncode == 0, bus.stderr
    assert f"'sign_in_valid_until': <int64 {kept}>" in bus.stdout, bus.stdout
    assert "'sign_in_ended': <false>" in bus.stdout, bus.stdout

    # A restart: the new process knows it from the keyring item before the account is used.
    agent.restart()
    wait_for(lambda: agent.account_status("work").get("sign_in_valid_until") == kept, 15, "the deadline read back")

    # A refresh whose answer names a shorter lifetime: status and the keyring item follow.
    lifetime["value"] = 86400 * 10
    refreshed_at = int(time.time())
    assert agent.authctl("token", "work", "--refresh").returncode == 0
    rt, kept = stored(keyring, auth_server)
    agent.remember(rt)
    assert refreshed_at + 86400 * 10 - 1 <= kept <= int(time.time()) + 86400 * 10 + 1, kept
    assert agent.account_status("work")["sign_in_valid_until"] == kept
    human = agent.authctl("status").stdout
    assert "(in 9 days)" in human or "(in 10 days)" in human, human
    assert_alive(agent)


def test_configured_idle_lifetime_when_the_server_says_nothing(make_agent, keyring, auth_server):
    agent = make_agent(work={"sign_in_lifetime": "90d", "sign_in_lifetime_kind": "idle"})
    before = int(time.time())
    agent.login("work")
    rt, kept = stored(keyring, auth_server)
    agent.remember(rt)
    assert before + 90 * 86400 - 1 <= kept <= int(time.time()) + 90 * 86400 + 1
    assert agent.account_status("work")["sign_in_valid_until"] == kept


def test_short_lifetime_warns_on_the_desktop_then_reads_as_needing_sign_in(
        make_agent, keyring, auth_server, fault_proxy, notification_server):
    # The sign-in lives 16 s, the warning window is 10 s: a warning about 6 s after the sign-in, the end at 16 s.
    fault_proxy.quirk(q.refresh_token_lifetime({"value": 16}))
    agent = make_agent(work={"token_endpoint": fault_proxy.base + "/o/token/", "sign_in_warning": 10})
    agent.login("work")
    rt, kept = stored(keyring, auth_server)
    agent.remember(rt)
    assert kept is not None

    def ending():
        return [n for n in notifications(notification_server) if n.get("summary", "").startswith("Sign-in to work ends")]

    assert agent.account_status("work")["sign_in_ended"] is False
    wait_for(lambda: ending(), 15, "the warning notification")
    [warning] = ending()
    assert warning["summary"] == "Sign-in to work ends today", warning
    assert "authctl login work" in warning["body"] and "valid until" in warning["body"]
    assert warning["actions"] == ["sign-in", "Sign in"]
    assert warning["urgency"] == 2, "critical on the last day"
    assert rt not in json.dumps(warning)
    assert "the sign-in ends soon" in agent.log()

    # The warning is noted in the keyring item, so an agent started again (socket activation after an idle exit)
    # does not repeat it that day.
    wait_for(lambda: "attribute.warned_at" in keyring.secret_tool_attributes("work")[0], 10,
             "the warning noted in the keyring item")
    assert stored(keyring, auth_server)[0] == rt
    agent.restart()

    # The end: the account reads as needing a sign-in (status, the usual sign-in notification), once.
    wait_for(lambda: any(n.get("summary") == "Sign in to work" for n in notifications(notification_server)), 20,
             "the sign-in notification at the end")
    assert "the sign-in has reached its end" in agent.log()
    human = agent.authctl("status").stdout
    assert "sign-in ended" in human and "run `authctl login work`" in human, human
    # The JSON says it too, in a field of its own (issue 35); `signed_in` stays true: the refresh token is kept.
    status = agent.account_status("work")
    assert status["sign_in_ended"] is True and status["signed_in"] is True, status
    assert len(ending()) == 1, "one warning per day at most"
    # Never deleted on a guess: the refresh token is still in the keyring.
    assert stored(keyring, auth_server)[0] == rt
    assert_alive(agent)


def test_a_warning_due_at_sign_in_is_in_the_keyring_item_when_login_returns_and_not_repeated_after_a_restart(
        make_agent, keyring, auth_server, fault_proxy, notification_server):
    """Issue 35: a server that gives the sign-in 2 days (inside the default 3-day `sign_in_warning`), as a GitHub App
    near the end of its six months does. The warning comes at once, and it is in the keyring item by the time
    `authctl login` returns: with the default idle exit the agent may stop any moment after, and its next start
    must not repeat that day's warning. Its day count is the one status shows in that second."""
    fault_proxy.quirk(q.refresh_token_lifetime({"value": 2 * 86400}))
    agent = proxied_agent(make_agent, fault_proxy)
    agent.login("work")
    [item] = keyring.secret_tool_attributes("work")
    assert "attribute.warned_at" in item, f"no warned_at when the sign-in returned: {sorted(item)}"
    rt, until = stored(keyring, auth_server)
    agent.remember(rt)

    def ending():
        return [n for n in notifications(notification_server) if n.get("summary", "").startswith("Sign-in to work ends")]

    wait_for(lambda: ending(), 15, "the warning notification")
    [warning] = ending()
    assert warning["summary"] == "Sign-in to work ends in 2 days", warning
    assert warning["urgency"] != 2, "not critical: not the last day"
    assert agent.log().count("the sign-in ends soon") == 1

    agent.restart()
    # The restarted agent reads the item and steps its watch in one turn of the broker: once status shows the date,
    # a repeated warning would already be in the log.
    wait_for(lambda: agent.account_status("work").get("sign_in_valid_until") == until, 15, "the deadline read back")
    assert agent.log().count("the sign-in ends soon") == 1, "no second warning after the restart"
    [item_after] = keyring.secret_tool_attributes("work")
    assert item_after["attribute.warned_at"] == item["attribute.warned_at"]
    assert len(ending()) == 1
    assert_alive(agent)
