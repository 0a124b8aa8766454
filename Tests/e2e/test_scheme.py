"""Private-use URI scheme redirects (RFC 8252 §7.1) end to end: `authctl register-scheme` writes the .desktop file,
the scripted browser, on reaching `org.example.authagent:/oauth2/callback/work?...`, does what a desktop does (runs
the registered `authctl callback %u`), and the agent judges the URI like any response. No listener is opened."""
import os
import re
import subprocess
from urllib.parse import parse_qs, urlsplit, urlunsplit

from conftest import FAKE_BROWSER, read_until, wait_for
import pytest

pytestmark = pytest.mark.release  # also run against the installed package (scripts/test)

SCHEME = "org.example.authagent"
REDIRECT = f"{SCHEME}:/oauth2/callback/work"
URL_RE = re.compile(r"(http://127\.0\.0\.1:\d+/o/authorize/\?\S+)")


def scheme_agent(make_agent, **kw):
    return make_agent(work={"redirect_uri": REDIRECT}, **kw)


def register(agent):
    result = agent.authctl("register-scheme", "work")
    assert result.returncode == 0, result.stderr
    desktop = agent.home / ".local" / "share" / "applications" / f"auth-agent-{SCHEME}.desktop"
    assert desktop.exists(), result.stdout
    return desktop


def agent_listening_ports(pid: int) -> list[int]:
    """TCP ports in LISTEN state on sockets the process holds (its fds matched against /proc/net/tcp*)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = []
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(path) as f:
            next(f)
            for line in f:
                fields = line.split()
                if fields[3] == "0A" and fields[9] in inodes:
                    ports.append(int(fields[1].split(":")[1], 16))
    return ports


def test_scheme_sign_in_through_the_desktop_handler(make_agent, keyring, auth_server):
    agent = scheme_agent(make_agent)
    accounts = agent.authctl("accounts", "--json")
    assert REDIRECT in accounts.stdout, "authctl accounts does not show the redirect URI to register"
    desktop = register(agent)
    text = desktop.read_text()
    assert f"MimeType=x-scheme-handler/{SCHEME};" in text
    exec_line = next(line for line in text.splitlines() if line.startswith("Exec="))
    assert exec_line.endswith(" callback %u") and "authctl" in exec_line, exec_line

    agent.login("work")
    log = agent.browser_log.read_text()
    assert f"SCHEME {SCHEME} -> exit 0 (callback)" in log, log
    rt = keyring.secret_tool_lookup("work", auth_server.issuer)
    assert rt, "no refresh token after the scheme sign-in"
    agent.remember(rt)
    token = agent.token("work")
    assert auth_server.introspect(token)["active"] is True


def test_scheme_sign_in_opens_no_listener_and_refuses_wrong_and_replayed_uris(make_agent, keyring, auth_server):
    agent = scheme_agent(make_agent, browser_mode="none")
    register(agent)
    login = subprocess.Popen([str(agent.bins / "authctl"), "login", "work"], env=dict(agent.env, DISPLAY=":0"),
                             stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = URL_RE.search(read_until(login.stderr, "Waiting for the sign-in", 20)).group(1)
        assert parse_qs(urlsplit(url).query)["redirect_uri"] == [REDIRECT]
        assert agent_listening_ports(agent.proc.pid) == [], "a listener was opened for a private-use scheme"
        # The person signs in; this "browser" prints the redirect instead of handing it over, so the test can replay it.
        env = dict(agent.env, FAKE_BROWSER_MODE="print-redirect")
        env.pop("FAKE_BROWSER_LOG")
        printed = subprocess.run([str(FAKE_BROWSER), url], env=env, capture_output=True, text=True, timeout=60)
        assert printed.returncode == 0, printed.stderr
        redirect = printed.stdout.strip()
        parts = urlsplit(redirect)
        assert (parts.scheme, parts.netloc, parts.path) == (SCHEME, "", "/oauth2/callback/work")
        agent.remember(parse_qs(parts.query)["code"][0])

        wrong = [
            urlunsplit((SCHEME, "", "/oauth2/callback/work", parts.query.replace("state=", "state=x"), "")),
            urlunsplit((SCHEME, "", "/oauth2/callback/other", parts.query, "")),
            f"{SCHEME}://evil/oauth2/callback/work?{parts.query}",
            urlunsplit(("org.example.other", "", "/oauth2/callback/work", parts.query, "")),
        ]
        for uri in wrong:
            result = agent.authctl("callback", uri)
            assert result.returncode == 7, (uri.split("?")[0], result.returncode, result.stderr)
            assert parse_qs(parts.query)["code"][0] not in result.stderr, "authctl echoed the code"
        assert agent.account_status("work")["login_pending"] is True, "a wrong URI ended the sign-in"

        result = agent.authctl("callback", redirect)
        assert result.returncode == 0, result.stderr
        assert "Handed the sign-in response for 'work'" in result.stdout
        out, err = login.communicate(timeout=60)
        assert login.returncode == 0, err
        assert "Signed in to 'work'" in out

        replay = agent.authctl("callback", redirect)
        assert replay.returncode == 7 and "no sign-in is pending" in replay.stderr, replay.stderr
    finally:
        if login.poll() is None:
            login.kill()
            login.communicate(timeout=10)
    agent.remember(keyring.secret_tool_lookup("work", auth_server.issuer))
    assert "state does not match" in agent.log()


def test_denied_through_the_scheme_handler(make_agent, keyring):
    agent = scheme_agent(make_agent, browser_mode="deny")
    register(agent)
    result = agent.authctl("login", "work", env={"DISPLAY": ":0"})
    assert result.returncode == 7 and "denied" in result.stderr, (result.returncode, result.stderr)
    wait_for(lambda: f"SCHEME {SCHEME} -> exit 0 (callback, error=access_denied)" in agent.browser_log.read_text(), 10,
             "the handler to report the denial")
    assert keyring.secret_tool_count("work") == 0


def test_register_scheme_refuses_a_loopback_account(agent):
    result = agent.authctl("register-scheme", "work")
    assert result.returncode == 8, result.stderr
    assert "uses the loopback redirect" in result.stderr
    assert not (agent.home / ".local" / "share" / "applications").exists()


def test_register_scheme_all_registers_every_scheme_account_and_skips_loopback(make_agent, auth_server):
    """`make install` runs `authctl register-scheme --all`: every account with a private-use scheme gets its handler,
    loopback accounts none, and no account at all is not an error."""
    from conftest import default_account
    other_scheme = "org.example.other"
    agent = make_agent(accounts={
        "work": default_account(auth_server.issuer, redirect_uri=REDIRECT),
        "mail": default_account(auth_server.issuer, redirect_uri=f"{other_scheme}:/oauth2/callback/mail"),
        "plain": default_account(auth_server.issuer),
    })
    result = agent.authctl("register-scheme", "--all")
    assert result.returncode == 0, result.stderr
    applications = agent.home / ".local" / "share" / "applications"
    assert sorted(p.name for p in applications.iterdir() if p.suffix == ".desktop") == sorted([
        f"auth-agent-{other_scheme}.desktop", f"auth-agent-{SCHEME}.desktop"])
    assert "(account 'work')" in result.stdout and "(account 'mail')" in result.stdout
    assert "plain" not in result.stdout
    both = agent.authctl("register-scheme", "work", "--all")
    assert both.returncode == 2 and "not both" in both.stderr, (both.returncode, both.stderr)
    neither = agent.authctl("register-scheme")
    assert neither.returncode == 2 and "--all" in neither.stderr, (neither.returncode, neither.stderr)


def test_register_scheme_all_with_only_loopback_accounts_registers_nothing(agent):
    result = agent.authctl("register-scheme", "--all")
    assert result.returncode == 0, result.stderr
    assert "nothing to register" in result.stdout
    assert not (agent.home / ".local" / "share" / "applications").exists()
