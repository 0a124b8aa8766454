"""The headline sign-in with a real browser: headless Chromium (Debian's chromium and chromium-driver, driven through
Selenium by Tests/Fixtures/browser/chromium-browser) is the agent's $BROWSER. It signs in at the test server's login
page, answers the consent page when the client asks for one, follows the redirect to the agent's loopback listener
and records what it saw there: the page, its response headers as Chromium received them, console messages.

In the release subset (-m release). Without chromium, chromedriver or selenium the module is skipped with the reason,
or fails when AUTH_AGENT_REAL_BROWSER=1 (CI sets it: there a missing browser is a broken setup, not a choice).
"""
import json

from test_dpop import dpop_server, events as dpop_events  # noqa: F401  (the DPoP server fixture)
import os
import subprocess
import time
from pathlib import Path

import pytest

from conftest import FIXTURES, VENV_PYTHON, pid_alive, wait_for

pytestmark = pytest.mark.release

CHROMIUM_BROWSER = FIXTURES / "browser" / "chromium-browser"
CONSENT_CLIENT = "auth-agent-test-consent"  # the fixture client whose sign-in shows the consent page
# What the listener sends with every page (Sources/AuthTransport/LoopbackRedirectListener.swift), as Chromium saw it.
LISTENER_HEADERS = {
    "content-type": "text/html; charset=utf-8",
    "cache-control": "no-store",
    "pragma": "no-cache",
    "referrer-policy": "no-referrer",
    "content-security-policy": "default-src 'none'; style-src 'unsafe-inline'",
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "connection": "close",
}


@pytest.fixture(scope="module", autouse=True)
def chromium():
    """Chromium, chromedriver and selenium are there, or the module is skipped (fails: AUTH_AGENT_REAL_BROWSER=1)."""
    problems = [f"{path} is missing" for path in ("/usr/bin/chromium", "/usr/bin/chromedriver")
                if not os.access(path, os.X_OK)]
    probe = subprocess.run([str(VENV_PYTHON), "-c", "import selenium"], capture_output=True, text=True, timeout=30)
    if probe.returncode != 0:
        problems.append(f"selenium is not importable by {VENV_PYTHON} (run scripts/setup)")
    if problems:
        reason = "; ".join(problems) + " (Debian packages chromium chromium-driver; scripts/setup installs both)"
        if os.environ.get("AUTH_AGENT_REAL_BROWSER") == "1":
            pytest.fail(f"AUTH_AGENT_REAL_BROWSER=1 but {reason}", pytrace=False)
        pytest.skip(reason)


def chromium_agent(make_agent, client_id=None, mode="login", server=None):
    work = {"login_timeout": 60}  # Chromium's start-up on a loaded CI machine must not decide the test
    if client_id:
        work["client_id"] = client_id
    return make_agent(work=work, browser_mode=mode, env={"BROWSER": str(CHROMIUM_BROWSER)}, server=server)


def what_chromium_saw(agent) -> dict:
    """Waits (bounded: the browser program gives up after 60 s) for the browser program to finish and Chromium to be
    gone; the listener's page as recorded in the browser log."""
    def finished():
        text = agent.browser_log.read_text()
        return text if "\nDONE " in text or "\nFAIL " in text else None

    log = wait_for(finished, 75, "chromium-browser to finish")
    assert "\nFAIL " not in log, f"chromium-browser failed:\n{log}"
    lines = log.splitlines()
    pid = int(next(line for line in lines if line.startswith("START ")).rsplit("pid=", 1)[1])
    profile = next(line for line in lines if line.startswith("CHROMIUM ")).rsplit("profile=", 1)[1]
    wait_for(lambda: not pid_alive(pid), 20, "chromium-browser to exit")
    # Chromium itself is gone with its throwaway profile: no browser outlives the sign-in.
    assert not Path(profile).exists(), "Chromium's profile directory was left behind"
    left = [p for p in Path("/proc").iterdir() if p.name.isdigit() and profile.encode() in _cmdline(p)]
    assert not left, f"Chromium processes outlived the browser program: {[p.name for p in left]}"
    # Never a code or token in what the browser program wrote.
    for secret in agent.server.issued_secrets():
        assert secret not in log, "an authorization code or token appears in the browser log"
    seen = json.loads(next(line for line in lines if line.startswith("PAGE ")).removeprefix("PAGE "))
    seen["log"] = log
    return seen


def _cmdline(proc: Path) -> bytes:
    try:
        return (proc / "cmdline").read_bytes()
    except OSError:
        return b""


def assert_listener_page(seen: dict, status: int, title: str, words: str):
    assert seen["status"] == status, seen
    assert seen["title"] == title, seen
    assert words in seen["text"], seen["text"]
    headers = seen["headers"]
    for name, value in LISTENER_HEADERS.items():
        assert headers.get(name) == value, f"{name}: {headers.get(name)!r}"
    # Nothing else: no cookie, no server banner; only the length on top of the headers above.
    assert set(headers) == set(LISTENER_HEADERS) | {"content-length"}, sorted(headers)
    # The page's inline style applied under its CSP (body colour #222), and Chromium reported nothing about the
    # listener's origin: no CSP violation, no failed load.
    assert seen["body_color"] == "rgb(34, 34, 34)", seen["body_color"]
    assert seen["console"] == [], seen["console"]


@pytest.mark.parametrize("client_id", [None, CONSENT_CLIENT], ids=["no-consent", "consent"])
def test_chromium_signs_in_through_the_loopback_listener(make_agent, keyring, auth_server, client_id):
    agent = chromium_agent(make_agent, client_id)
    started = time.monotonic()
    result = agent.authctl("login", "work", timeout=90)
    elapsed = time.monotonic() - started
    assert result.returncode == 0, f"authctl login failed ({result.returncode}):\n{result.stderr}\n" \
                                   f"{agent.browser_log.read_text()}"
    assert "Signed in to 'work'" in result.stdout
    assert "alice@example.test" in result.stdout
    seen = what_chromium_saw(agent)
    print(f"authctl login with Chromium: {elapsed:.1f} s; {seen['log'].splitlines()[1]}")

    assert_listener_page(seen, 200, "Signed in", "auth-agent has received the sign-in. You can close this tab.")
    # The listener answers the redirect in place (no second redirect to a clean URL): the address bar keeps the
    # single-use, PKCE-bound code; the agent's listener is already closed by then.
    callback = seen["url"].split("?")[0]
    assert seen["url"] == f"{callback}?code=...&state=...", seen["url"]
    assert callback.startswith("http://127.0.0.1:") and callback.endswith("/oauth2/callback/work"), callback
    # The way there: the server's real login form, then (for the consent client) its consent form, then the
    # authorization endpoint's redirect straight to the listener.
    navigation = seen["navigation"]
    assert f"GET {auth_server.base}/accounts/login/ -> 200" in navigation, navigation
    assert f"POST {auth_server.base}/accounts/login/ -> 302" in navigation, navigation
    if client_id == CONSENT_CLIENT:
        assert "CONSENT approve (Authorize)" in seen["log"]
        assert navigation[-2:] == [f"POST {auth_server.issuer}/authorize/ -> 302", f"GET {callback} -> 200"], navigation
    else:
        assert "CONSENT" not in seen["log"]
        assert navigation[-2:] == [f"GET {auth_server.issuer}/authorize/ -> 302", f"GET {callback} -> 200"], navigation

    token = agent.token("work")
    assert token, "authctl token printed nothing"
    claims = auth_server.introspect(token)
    assert claims["active"] is True and claims["username"] == "alice", claims
    assert claims["client_id"] == (client_id or "auth-agent-test"), claims
    refresh = keyring.secret_tool_lookup("work", auth_server.issuer, client_id=client_id or "auth-agent-test")
    assert refresh, "no refresh token in the keyring after the sign-in"
    agent.remember(refresh)


def test_chromium_denies_consent_and_sees_the_listener_failure_page(make_agent, keyring, auth_server):
    agent = chromium_agent(make_agent, CONSENT_CLIENT, mode="deny")
    result = agent.authctl("login", "work", timeout=90)
    assert result.returncode == 7, (result.returncode, result.stderr)
    assert "denied" in result.stderr
    seen = what_chromium_saw(agent)
    assert "CONSENT deny (Cancel)" in seen["log"]
    assert_listener_page(seen, 200, "Sign-in not completed", "The sign-in was declined.")
    assert seen["url"].endswith("/oauth2/callback/work?error=...&state=..."), seen["url"]
    assert seen["navigation"][-2].startswith(f"POST {auth_server.issuer}/authorize/ -> 302"), seen["navigation"]
    assert keyring.secret_tool_count("work") == 0
    assert agent.account_status("work")["last_error"]["code"] == "access_denied"
    assert agent.authctl("token", "work").returncode != 0


def test_chromium_signs_in_with_a_pushed_request_and_a_dpop_bound_code(make_agent, keyring, dpop_server):
    """A real browser through PAR (its URL carries only client_id and request_uri) and the DPoP server: the code
    it brings back is bound to the agent's key (dpop_jkt) and redeemed with a proof; the token works at the
    protected resource only with the agent's proof."""
    agent = chromium_agent(make_agent, server=dpop_server)
    result = agent.authctl("login", "work", timeout=90)
    assert result.returncode == 0, f"authctl login failed ({result.returncode}):\n{result.stderr}\n" \
                                   f"{agent.browser_log.read_text()}"
    seen = what_chromium_saw(agent)
    assert_listener_page(seen, 200, "Signed in", "auth-agent has received the sign-in. You can close this tab.")
    # The server saw the browser's authorization request carry the pushed request_uri and nothing it ignored.
    uses = [e for e in dpop_events(dpop_server, "par_use") if e["result"] == "accepted"]
    assert uses and not any(e.get("ignored_params") for e in uses), uses
    assert agent.account_status("work")["dpop"] == "access_token"
    code = [e for e in dpop_events(dpop_server, "code")][-1]
    issued = [e for e in dpop_events(dpop_server, "token") if e["grant"] == "authorization_code"][-1]
    assert issued["jkt"] == code["dpop_jkt"] and issued["token_type"] == "DPoP"
