"""Opening the sign-in page through the xdg-desktop-portal (issue 3; SECURITY.md 10): the agent calls
org.freedesktop.portal.OpenURI.OpenURI on the session bus and only falls back to $BROWSER / xdg-open when the
portal is absent or fails at the call; once the portal has accepted, nothing more is started. The portal is a small fake (Tests/Fixtures/portal) on the agent's private session bus
that records the call and then starts the fixture's scripted browser as the desktop would (a process of its own,
with its own log); the agent, keyring and authorization server are the real ones."""
import json
import subprocess
import time
from urllib.parse import parse_qs, urlsplit

import pytest

from conftest import FAKE_BROWSER, REPO, SYSTEM_PATH, VENV_PYTHON, read_until, stop_popen, wait_for
from test_cli import checks_of, doctor_json

FAKE = REPO / "Tests" / "Fixtures" / "portal" / "fake_portal.py"


def start_portal(keyring, tmp_path, mode: str):
    log = tmp_path / f"portal-{mode}.jsonl"
    log.touch()
    browser_log = tmp_path / "portal-browser.log"
    browser_log.touch()
    env = {"PATH": SYSTEM_PATH, "DBUS_SESSION_BUS_ADDRESS": keyring.address, "LANG": "C.UTF-8",
           "FAKE_BROWSER": str(FAKE_BROWSER), "FAKE_BROWSER_PYTHON": str(VENV_PYTHON),
           "FAKE_BROWSER_LOG": str(browser_log), "FAKE_BROWSER_MODE": "login"}
    proc = subprocess.Popen(["/usr/bin/python3", str(FAKE), str(log), mode], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    read_until(proc.stdout, "ready", 20)
    proc.log = log
    proc.browser_log = browser_log
    return proc


def running_portal(keyring, tmp_path, mode: str):
    proc = start_portal(keyring, tmp_path, mode)
    yield proc
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture
def portal(keyring, tmp_path):
    yield from running_portal(keyring, tmp_path, "browse")


@pytest.fixture
def dismissing_portal(keyring, tmp_path):
    yield from running_portal(keyring, tmp_path, "dismiss")


@pytest.fixture
def failing_portal(keyring, tmp_path):
    yield from running_portal(keyring, tmp_path, "error")


def calls(portal) -> list[dict]:
    return [json.loads(line) for line in portal.log.read_text().splitlines()]


def shown_url(stderr: str) -> str:
    """The URL authctl prints (always, whatever opened the browser)."""
    return next(line.strip() for line in stderr.splitlines() if line.strip().startswith("http"))


def test_sign_in_completes_through_the_portal(make_agent, keyring, auth_server, portal):
    agent = make_agent()
    result = agent.login("work")
    assert "Opened your browser" in result.stderr, result.stderr
    url = shown_url(result.stderr)

    [call] = calls(portal)
    assert call["uri"] == url, "the portal got another URL than the one authctl showed"
    assert call["parent_window"] == "" and call["options"] == ["handle_token"]
    query = parse_qs(urlsplit(call["uri"]).query)
    assert call["uri"].startswith(auth_server.base + "/o/authorize/")
    assert query["code_challenge_method"] == ["S256"] and len(query["state"][0]) >= 43
    # The browser was started by the portal (its own log), never by the agent from $BROWSER.
    assert sum(line.startswith("START ") for line in portal.browser_log.read_text().splitlines()) == 1
    assert agent.browser_runs() == 0, "the agent started $BROWSER although the portal opened the page"
    assert "opened the sign-in page through the xdg-desktop-portal" in agent.log()

    rt = keyring.secret_tool_lookup("work", auth_server.issuer)
    assert rt, "no refresh token after a sign-in through the portal"
    agent.remember(rt)
    token = agent.token("work")
    agent.remember(token)
    assert auth_server.introspect(token).get("active") is True
    agent.assert_no_secrets_logged()

    rc, report = doctor_json(agent)
    browser = checks_of(report)[(None, "browser")]
    assert browser == {"check": "browser", "status": "ok", "message":
                       "the agent opens the browser through the xdg-desktop-portal (org.freedesktop.portal.Desktop OpenURI)"}


def test_a_portal_that_fails_falls_back_to_the_browser_variable(make_agent, keyring, auth_server, failing_portal):
    agent = make_agent()
    result = agent.login("work")
    assert "Opened your browser" in result.stderr, result.stderr
    [call] = calls(failing_portal)
    assert call["uri"] == shown_url(result.stderr)
    assert agent.browser_runs() == 1, "the agent did not fall back to $BROWSER after the portal failed"
    log = agent.log()
    assert "the xdg-desktop-portal could not open the sign-in page; starting the browser directly" in log
    assert "org.freedesktop.portal.Error.Failed" in log
    rt = keyring.secret_tool_lookup("work", auth_server.issuer)
    assert rt
    agent.remember(rt)


def test_a_dismissed_chooser_starts_no_browser_later(make_agent, keyring, auth_server, dismissing_portal):
    """The portal accepts the request, then its Response says the person closed the application chooser (code 1):
    the agent logs it and starts nothing more once the launch has returned (authctl shows the URL to open)."""
    agent = make_agent()
    login = agent.authctl_popen("login", "work")
    try:
        wait_for(lambda: "response=dismissed" in agent.log(), 20, "the portal's Response in the agent's log")
        time.sleep(1)  # a late fallback would start $BROWSER right after the Response
        [call] = calls(dismissing_portal)
        assert call["options"] == ["handle_token"]
        assert sum(line.startswith("START ") for line in dismissing_portal.browser_log.read_text().splitlines()) == 0
        assert agent.browser_runs() == 0, "the agent started $BROWSER after the portal had accepted the request"
        log = agent.log()
        assert "opened the sign-in page through the xdg-desktop-portal" in log
        assert "the xdg-desktop-portal did not open the sign-in page" in log
        assert "starting the browser directly" not in log
        assert login.poll() is None, "the sign-in ended although nobody opened its page"
    finally:
        stop_popen(login)


def test_without_a_portal_the_browser_variable_is_used_as_before(make_agent, keyring, auth_server):
    agent = make_agent()
    agent.login("work")
    assert agent.browser_runs() == 1
    log = agent.log()
    assert "could not open the sign-in page" not in log, "a missing portal is not a failure"
    assert "through the xdg-desktop-portal" not in log
    rt = keyring.secret_tool_lookup("work", auth_server.issuer)
    assert rt
    agent.remember(rt)
    browser = checks_of(doctor_json(agent)[1])[(None, "browser")]
    assert browser["message"] == f"the agent starts {agent.env['BROWSER']} (from $BROWSER)"
