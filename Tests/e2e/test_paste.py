"""Manual paste (`authctl login --no-browser`): the agent starts no browser, authctl prints the URL, the person signs
in elsewhere and pastes the final redirect URL, which the agent judges exactly like a loopback response. The test
plays the person: the fake browser in `print-redirect` mode signs in and prints the redirect instead of following it."""
import json
import re
import subprocess
from urllib.parse import parse_qs, urlsplit, urlunsplit

from conftest import FAKE_BROWSER, read_until, wait_for
import pytest

pytestmark = pytest.mark.release  # also run against the installed package (scripts/test)

URL_RE = re.compile(r"(http://127\.0\.0\.1:\d+/o/authorize/\?\S+)")
PROMPT = "press Enter"


def start_paste_login(agent, account="work"):
    proc = subprocess.Popen([str(agent.bins / "authctl"), "login", "--no-browser", account], env=agent.env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    shown = read_until(proc.stderr, PROMPT, 20)
    match = URL_RE.search(shown)
    assert match, f"no authorization URL on stderr:\n{shown}"
    return proc, match.group(1), shown


def sign_in_elsewhere(agent, url, mode="print-redirect"):
    env = dict(agent.env, FAKE_BROWSER_MODE=mode)
    env.pop("FAKE_BROWSER_LOG")  # the agent's browser log shows only browsers the agent started
    result = subprocess.run([str(FAKE_BROWSER), url], env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def paste(proc, line):
    proc.stdin.write(line + "\n")
    proc.stdin.flush()


def browser_started(agent) -> bool:
    return agent.browser_log.exists() and "START" in agent.browser_log.read_text()


def test_pasted_redirect_signs_in_and_a_wrong_one_is_refused(agent, keyring, auth_server):
    proc, url, shown = start_paste_login(agent)
    try:
        assert "Opened your browser" not in shown
        assert not browser_started(agent), "the agent started a browser although --no-browser was given"
        redirect = sign_in_elsewhere(agent, url)
        parts = urlsplit(redirect)
        assert parts.hostname == "127.0.0.1" and parts.path == "/oauth2/callback/work"
        code = parse_qs(parts.query)["code"][0]
        agent.remember(code)

        # Wrong port, wrong path, localhost: each refused with a clear message; the sign-in keeps waiting.
        wrong = [
            urlunsplit((parts.scheme, f"127.0.0.1:{parts.port + 1 if parts.port < 65535 else 1}", parts.path, parts.query, "")),
            urlunsplit((parts.scheme, parts.netloc, "/oauth2/callback/personal", parts.query, "")),
            urlunsplit((parts.scheme, f"localhost:{parts.port}", parts.path, parts.query, "")),
        ]
        seen = ""
        for bad in wrong:
            paste(proc, bad)
            seen += read_until(proc.stderr, "Paste the URL again", 20)
        assert seen.count("the sign-in is still waiting") == 3, seen
        assert code not in seen, "authctl echoed the code"
        assert proc.poll() is None, "a wrong URL ended the sign-in"
        assert agent.account_status("work")["login_pending"] is True

        paste(proc, redirect)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=10)
    assert proc.returncode == 0, err
    assert "Signed in to 'work'" in out and "alice@example.test" in out
    assert code not in out + err
    rt = keyring.secret_tool_lookup("work", auth_server.issuer)
    assert rt, "no refresh token in the keyring after the pasted sign-in"
    agent.remember(rt)
    assert agent.account_status("work")["login_pending"] is False
    assert not browser_started(agent)
    assert agent.token("work")
    assert code not in agent.log(), "the pasted URL (with its code) reached the agent's log"
    assert "ignored a redirect that is not a valid response" in agent.log()


def test_loopback_still_wins_while_waiting_for_a_paste(agent, keyring, auth_server):
    proc, url, _ = start_paste_login(agent)
    try:
        # The browser (on this machine after all) reaches the loopback listener: no paste needed.
        sign_in_elsewhere(agent, url, mode="login")
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=10)
    assert proc.returncode == 0, err
    assert "Signed in to 'work'" in out
    agent.remember(keyring.secret_tool_lookup("work", auth_server.issuer))


def test_login_callback_protocol_errors(agent):
    # No sign-in pending: refused, nothing starts.
    reply = agent.raw(json.dumps({"v": 1, "id": 1, "op": "login_callback", "account": "work",
                                  "url": "http://127.0.0.1:1/oauth2/callback/work?code=x&state=y"}).encode() + b"\n")
    assert reply[0]["error"]["code"] == "login_failed", reply
    assert "no sign-in is pending" in reply[0]["error"]["message"]
    assert "code=x" not in reply[0]["error"]["message"]
    reply = agent.raw(b'{"v":1,"id":2,"op":"login_callback","account":"work"}\n')
    assert reply[0]["error"]["code"] == "bad_request", reply
    reply = agent.raw(b'{"v":1,"id":3,"op":"login_callback","account":"nope","url":"http://127.0.0.1:1/"}\n')
    assert reply[0]["error"]["code"] == "unknown_account", reply
    reply = agent.raw(b'{"v":1,"id":4,"op":"login","account":"work","browser":"no"}\n')
    assert reply[0]["error"]["code"] == "bad_request", reply
    assert agent.account_status("work")["login_pending"] is False
