"""A clean `systemctl --user stop`, and the unit's journal after everything the stage did: no seccomp kill or
denied operation, no libdispatch start-up noise, and no token or code the test server issued, anywhere in the user's
journal."""
import json

import pytest

from conftest import ensure_running

DENIALS = ("SIGSYS", "status=31/SYS", "EPERM", "Operation not permitted")


def unit_journal(user) -> str:
    return user.journal("-u", "auth-agent.service", "-o", "cat")


def test_clean_stop(user, installed):
    ensure_running(user)
    cursor = user.journal_cursor()
    result = user.systemctl("stop", "auth-agent.service")
    assert result.returncode == 0, f"systemctl --user stop failed: {result.stderr.strip()}"
    assert user.is_active("auth-agent.service") == "inactive"
    assert user.show("auth-agent.service", "Result") == "success"
    assert user.show("auth-agent.service", "ExecMainCode") == "1", "the agent did not exit by itself (CLD_EXITED)"
    assert user.show("auth-agent.service", "ExecMainStatus") == "0"
    journal = user.journal("-u", "auth-agent.service", "-o", "cat", after=cursor)
    assert "Stopped auth-agent.service" in journal and "Failed with result" not in journal


def test_no_sandbox_denials_in_the_journal(user, installed):
    journal = unit_journal(user)
    found = [line for line in journal.splitlines() if any(word in line for word in DENIALS)]
    assert not found, "denied by the unit's sandbox:\n" + "\n".join(found[:20])


def test_no_thread_priority_noise_in_the_journal(user, installed):
    """libdispatch's "Failed to set thread priority ... errno=13" on every start (RestrictRealtime=yes)."""
    found = [line for line in unit_journal(user).splitlines() if "Failed to set thread priority" in line]
    assert not found, f"{len(found)} lines, e.g. {found[0]!r}"


def test_no_issued_secret_in_the_users_journal(user, installed, auth_server):
    """Every token and code the test server issued during the stage, against every field of every entry."""
    secrets = auth_server.issued_secrets()
    assert secrets, "the test server issued nothing: the stage did not sign in"
    fields = []
    for line in user.journal("-o", "json").splitlines():
        fields += [value for value in json.loads(line).values() if isinstance(value, str)]
    text = "\n".join(fields)
    leaked = sum(1 for secret in secrets if secret in text)
    assert leaked == 0, f"{leaked} token(s) or code(s) issued by the test server appear in the user's journal"
