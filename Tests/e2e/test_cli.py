"""authctl as people use it: `doctor` (against the real agent, keyring and authorization server, a server with a
wrong clock, a broken issuer, a locked keyring, no agent at all), `accounts add/remove` (the written file is
loaded by the real agent, and the new account signs in), colour only on a terminal (a real pty) and never with
NO_COLOR or TERM=dumb, and help texts with examples."""
from __future__ import annotations

import contextlib
import email.utils
import fcntl
import http.server
import json
import os
import pty
import re
import select
import signal
import socket
import subprocess
import termios
import threading
import time

import pytest

from conftest import CLIENT_ID, REPO, bin_dir, default_account, file_mode, render_config

pytestmark = pytest.mark.release  # also run against the installed package (scripts/test)

ESC = "\x1b["


def checks_of(report: dict) -> dict:
    """{(account or None, check): check} of a `doctor --json` report."""
    return {(c.get("account"), c["check"]): c for c in report["checks"]}


def doctor_json(agent, *args, env=None) -> tuple[int, dict]:
    result = agent.authctl("doctor", "--json", *args, env=env, timeout=60)
    assert result.stderr == "", result.stderr
    return result.returncode, json.loads(result.stdout)


def run_in_pty(argv: list[str], env: dict, timeout: float = 30) -> tuple[int, str]:
    """Runs a program with stdout and stderr on a fresh pseudo-terminal; returns (exit code, everything it wrote)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, close_fds=True)
    os.close(slave)
    output = b""
    deadline = time.monotonic() + timeout
    exited = False
    try:
        while time.monotonic() < deadline:
            # Once it has exited, one more look without waiting: what it wrote last may still be in the terminal.
            ready, _, _ = select.select([master], [], [], 0 if exited else 0.2)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # EIO: the child closed the terminal
                    break
                if not chunk:
                    break
                output += chunk
            elif exited:
                break
            else:
                exited = proc.poll() is not None
        rc = proc.wait(timeout=max(1, deadline - time.monotonic()))
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
    return rc, output.decode(errors="replace")


# ----------------------------------------------------------------------------------------------------------------
# doctor


def test_doctor_passes_against_the_real_agent_keyring_and_server(agent, auth_server):
    rc, report = doctor_json(agent)
    assert rc == 0 and report["ok"] is True, report
    checks = checks_of(report)
    assert checks[(None, "agent")]["status"] == "ok"
    assert str(agent.socket_path) in checks[(None, "agent")]["message"]
    assert checks[(None, "protocol")]["status"] == "ok"
    assert checks[(None, "keyring")]["status"] == "ok"
    browser = checks[(None, "browser")]
    assert browser["status"] == "ok" and browser["message"] == f"the agent starts {agent.env['BROWSER']} (from $BROWSER)"
    # The agent's view of the display (it starts the browser), not authctl's: the test agent has none.
    display = checks[(None, "display")]
    assert display["status"] == "warn" and "--no-browser" in display["hint"], display
    assert display["message"].startswith("no DISPLAY or WAYLAND_DISPLAY in the agent's environment"), display
    assert (None, "session") not in checks, "authctl's own session is checked only when the agent cannot say"
    assert checks[(None, "config")] == {"check": "config", "status": "ok", "message": f"{agent.config_path} (mode 600, yours)"}
    assert checks[("work", "metadata")]["status"] == "ok"
    assert checks[("work", "signing keys")]["status"] == "ok"
    assert re.fullmatch(r"1 key at http://127\.0\.0\.1:\d+/o/\.well-known/jwks\.json|\d+ keys? at .*",
                        checks[("work", "signing keys")]["message"])
    clock = checks[("work", "clock")]
    assert clock["status"] == "ok", clock
    assert re.fullmatch(r"this machine's clock is (the same second as the server's|[01] s (ahead of|behind) the server's)",
                        clock["message"]), clock
    assert all("hint" not in c for c in report["checks"] if c["status"] == "ok")

    human = agent.authctl("doctor")
    assert human.returncode == 0 and human.stderr == ""
    assert ESC not in human.stdout, "no colour when stdout is not a terminal"
    lines = human.stdout.splitlines()
    assert lines[-1] == "1 warning."
    assert re.match(r"^ok    agent +auth-agent \S+ answers on ", lines[0]), lines[0]
    # One aligned line per check: the messages start in the same column. Found by their first 16 bytes: this is a
    # second run, and the clock check's message may have moved by a second since the JSON one.
    check_lines = [l for l in lines if re.match(r"^(ok|warn|fail|skip) ", l)]
    assert len(check_lines) == len(report["checks"])
    assert len({l.index(c["message"][:16]) for l, c in zip(check_lines, report["checks"])}) == 1, human.stdout
    assert any(l.strip().startswith("hint: ") and "`authctl login --no-browser ACCOUNT`" in l for l in lines)

    only = doctor_json(agent, "work")[1]
    assert {c.get("account") for c in only["checks"]} == {None, "work"}
    unknown = agent.authctl("doctor", "nope")
    assert unknown.returncode == 8 and unknown.stdout == ""
    assert unknown.stderr.startswith("authctl: no account named 'nope' is configured\nhint: see `authctl accounts`")


def test_doctor_without_an_agent_runs_the_local_checks_and_says_how_to_start_it(make_agent):
    agent = make_agent(start=False)
    rc, report = doctor_json(agent)
    assert rc == 1 and report["ok"] is False
    checks = checks_of(report)
    assert checks[(None, "agent")]["status"] == "fail"
    assert "systemctl --user start auth-agent.socket" in checks[(None, "agent")]["hint"]
    assert checks[(None, "keyring")]["status"] == "skip"
    assert checks[(None, "browser")] == {"check": "browser", "status": "ok",
                                         "message": f"an agent started from this shell starts {agent.env['BROWSER']} (from $BROWSER)"}
    assert checks[(None, "config")]["status"] == "ok"
    assert checks[(None, "accounts")]["status"] == "skip"
    # $BROWSER entries that need a shell are skipped, as the agent skips them; xdg-open is not installed here.
    no_browser = doctor_json(agent, env={"BROWSER": "firefox %s", "PATH": "/nonexistent"})[1]
    assert checks_of(no_browser)[(None, "browser")]["status"] == "warn"
    human = agent.authctl("doctor")
    assert human.returncode == 1
    assert "fail  agent" in human.stdout and "hint: start it with `systemctl --user start auth-agent.socket`" in human.stdout


@contextlib.contextmanager
def metadata_server(skew_seconds: int = 0, discovery: bool = True):
    """An OAuth server stand-in on 127.0.0.1 whose HTTP Date header is `skew_seconds` off; it serves a valid RFC 8414
    document naming itself (or 404 everywhere with `discovery=False`)."""
    state = {}

    class Handler(http.server.BaseHTTPRequestHandler):
        def date_time_string(self, timestamp=None):
            return email.utils.formatdate(time.time() + skew_seconds, usegmt=True)

        def do_GET(self):
            base = state["base"]
            if discovery and self.path in ("/.well-known/openid-configuration", "/.well-known/oauth-authorization-server"):
                body = json.dumps({"issuer": base, "authorization_endpoint": base + "/authorize",
                                   "token_endpoint": base + "/token", "code_challenge_methods_supported": ["S256"],
                                   "response_types_supported": ["code"]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
            else:
                body = b"not found"
                self.send_response(404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state["base"] = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state["base"]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def test_doctor_finds_a_wrong_clock_a_missing_discovery_document_and_an_unreachable_server(make_agent, auth_server):
    with metadata_server(skew_seconds=-3600) as late, metadata_server(skew_seconds=90) as early, \
            metadata_server(discovery=False) as broken:
        accounts = {
            "work": default_account(auth_server.issuer),
            "late": {"issuer": late, "client_id": "c", "scopes": ["email"]},
            "early": {"issuer": early, "client_id": "c", "scopes": ["email"]},
            "broken": {"issuer": broken, "client_id": "c", "scopes": ["email"]},
            "gone": {"issuer": "http://127.0.0.1:9/o", "client_id": "c", "scopes": ["email"]},
        }
        agent = make_agent(accounts=accounts)
        rc, report = doctor_json(agent)
    assert rc == 1 and report["ok"] is False
    checks = checks_of(report)
    assert checks[("work", "clock")]["status"] == "ok"
    late_clock = checks[("late", "clock")]
    assert late_clock["status"] == "fail"
    assert re.fullmatch(r"this machine's clock is 3[56]\d\d s ahead of the server's", late_clock["message"]), late_clock
    assert "timedatectl set-ntp true" in late_clock["hint"]
    assert checks[("late", "metadata")]["status"] == "ok", "the document itself is fine"
    early_clock = checks[("early", "clock")]
    assert early_clock["status"] == "warn" and re.fullmatch(r"this machine's clock is (8[89]|9[0-2]) s behind the server's",
                                                            early_clock["message"]), early_clock
    broken_meta = checks[("broken", "metadata")]
    assert broken_meta["status"] == "fail" and "no discovery document" in broken_meta["message"], broken_meta
    assert "issuer" in broken_meta["hint"]
    assert checks[("broken", "clock")]["status"] == "ok", "the 404 still carried the server's Date"
    gone = checks[("gone", "metadata")]
    # Connection refused: AsyncHTTPClient retries until its connect timeout, so this may end at doctor's own limit.
    assert gone["status"] == "fail" and re.search(r"cannot reach|no answer within 15 s", gone["message"]), gone
    assert checks[("gone", "clock")]["status"] == "warn"


def test_doctor_that_runs_out_of_time_fails_rather_than_passing_unchecked(make_agent):
    """An authorization server that takes the connection and never answers holds its account's checks (up to 15 s
    in the agent); `doctor --timeout 2` gives up first. That is a failed check (exit 1), not a skipped one that lets
    the report say "no failure" about checks nobody ran."""
    hole = socket.socket()
    hole.bind(("127.0.0.1", 0))
    hole.listen(16)
    try:
        port = hole.getsockname()[1]
        agent = make_agent(accounts={"slow": {"issuer": f"http://127.0.0.1:{port}/o", "client_id": "c",
                                              "scopes": ["email"]}})
        rc, report = doctor_json(agent, "--timeout", "2")
    finally:
        hole.close()
    assert rc == 1 and report["ok"] is False, report
    diagnose = checks_of(report)[(None, "diagnose")]
    assert diagnose["status"] == "fail", diagnose
    assert "did not answer within 2 s" in diagnose["message"] and "--timeout" in diagnose["hint"], diagnose


def test_doctor_reports_a_locked_keyring(agent, keyring):
    keyring.lock()
    try:
        rc, report = doctor_json(agent)
    finally:
        keyring.unlock()
    keyring_check = checks_of(report)[(None, "keyring")]
    assert rc == 1 and keyring_check["status"] == "fail", report
    assert keyring_check["message"].startswith("the Secret Service is locked") and "unlock the login keyring" in keyring_check["hint"]
    assert "gnome-keyring-daemon" in keyring_check["message"], "doctor names the owner of org.freedesktop.secrets"


# ----------------------------------------------------------------------------------------------------------------
# accounts add / remove


ORIGINAL = """# my auth-agent configuration
[agent]
log_level = "debug"   # noisy on purpose

"""


def test_accounts_add_writes_a_section_the_agent_loads_and_signs_in_with(make_agent, auth_server):
    original = ORIGINAL + render_config({"work": default_account(auth_server.issuer)}) + "# the end\n"
    agent = make_agent(config_text=original)
    added = agent.authctl("accounts", "add", "other", "--issuer", auth_server.issuer, "--client-id", CLIENT_ID,
                          "--scope", "openid", "--scope", "email", "--scope", "offline_access")
    assert added.returncode == 0, added.stderr
    assert added.stdout.splitlines()[:4] == [
        f"Added account 'other' to {agent.config_path}.", "",
        "Register this redirect URI at the provider (any port; the literal 127.0.0.1, not localhost):",
        "  http://127.0.0.1/oauth2/callback/other"]
    assert "  authctl reload " in added.stdout
    text = agent.config_path.read_text()
    assert text.startswith(original), "everything that was there is kept, comments included"
    assert file_mode(agent.config_path) == 0o600
    assert [p.name for p in agent.config_path.parent.iterdir()] == ["config.toml"], "no temporary file left"

    again = agent.authctl("accounts", "add", "other", "--issuer", auth_server.issuer, "--client-id", CLIENT_ID)
    assert again.returncode == 8 and "account 'other' already exists" in again.stderr
    assert agent.config_path.read_text() == text

    before = agent.authctl("accounts", "--json")
    assert [a["name"] for a in json.loads(before.stdout)["accounts"]] == ["work"], "not read before the reload"
    reload = agent.authctl("reload", "--json")
    assert reload.returncode == 0 and json.loads(reload.stdout)["added"] == ["other"], reload.stdout + reload.stderr
    listed = json.loads(agent.authctl("accounts", "--json").stdout)["accounts"]
    other = next(a for a in listed if a["name"] == "other")
    assert other["redirect_uri"] == "http://127.0.0.1/oauth2/callback/other", "the URI authctl printed"
    assert other["scopes"] == ["openid", "email", "offline_access"]
    agent.login("other")
    token = agent.token("other")
    assert auth_server.introspect(token)["active"] is True

    removed = agent.authctl("accounts", "remove", "other")
    assert removed.returncode == 0, removed.stderr
    assert agent.config_path.read_text() == original, "remove gives back exactly the file before add"
    missing = agent.authctl("accounts", "remove", "other")
    assert missing.returncode == 8 and "no [accounts.other] section" in missing.stderr
    agent.authctl("logout", "other")


def test_accounts_remove_takes_a_sub_table_written_away_from_its_section(make_agent, auth_server):
    """TOML lets `[accounts.NAME.extra_auth_params]` stand anywhere in the file, also after other sections: while it
    is there `accounts add` refuses the name, and `accounts remove` takes it with the section (left behind, it would
    define the account again, without an issuer, and the agent would not load the file). Nothing else changes, and
    the agent loads the result."""
    work = ORIGINAL + render_config({"work": default_account(auth_server.issuer)})
    original = (ORIGINAL + render_config({"other": default_account(auth_server.issuer)}) + "\n"
                + render_config({"work": default_account(auth_server.issuer)})
                + '\n[accounts.other.extra_auth_params]\nlogin_hint = "someone@example.com"\n\n# the end\n')
    agent = make_agent(config_text=original)
    again = agent.authctl("accounts", "add", "other", "--issuer", auth_server.issuer, "--client-id", CLIENT_ID)
    assert again.returncode == 8 and "account 'other' already exists" in again.stderr, again.stderr

    removed = agent.authctl("accounts", "remove", "other")
    assert removed.returncode == 0, removed.stderr
    assert agent.config_path.read_text() == work + "\n# the end\n", "every table of 'other', and nothing else"
    reload = agent.authctl("reload", "--json")
    assert reload.returncode == 0 and json.loads(reload.stdout)["removed"] == ["other"], reload.stdout + reload.stderr


def test_ctrl_c_at_the_secret_prompt_gives_the_terminal_its_echo_back(make_agent):
    """`accounts add` asks for a client secret with echo off on the controlling terminal; Ctrl-C there must not
    leave the user's terminal without echo."""
    agent = make_agent(start=False)
    master, slave = pty.openpty()

    def controlling_terminal():
        os.setsid()
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    proc = subprocess.Popen([str(agent.bins / "authctl"), "accounts", "add", "gh", "--preset", "github",
                             "--client-id", "Iv1.abc"], env=agent.env, stdin=slave, stdout=slave, stderr=slave,
                            preexec_fn=controlling_terminal, close_fds=True)
    try:
        seen = b""
        deadline = time.monotonic() + 30
        while b"(not shown)" not in seen and time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 1)
            if ready:
                seen += os.read(master, 4096)
        assert b"(not shown)" in seen, seen
        assert not termios.tcgetattr(slave)[3] & termios.ECHO, "the prompt did not turn echo off (the test proves nothing)"
        os.write(master, b"\x03")
        assert proc.wait(timeout=30) == -signal.SIGINT
        assert termios.tcgetattr(slave)[3] & termios.ECHO, "the terminal was left without echo"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        os.close(master)
        os.close(slave)


def test_accounts_add_checks_with_the_agents_loader_and_keeps_secrets_out_of_argv(make_agent, auth_server):
    agent = make_agent(start=False)
    original = agent.config_path.read_text()
    # Not https and not loopback: the agent's loader refuses it, and the file stays as it was.
    unsafe = agent.authctl("accounts", "add", "x", "--issuer", "http://login.example.com", "--client-id", "c")
    assert unsafe.returncode == 8, unsafe
    assert unsafe.stderr.startswith("authctl: the edited configuration would not load, so ")
    assert "[accounts.x] 'issuer'" in unsafe.stderr and str(agent.config_path) in unsafe.stderr
    assert ".authctl-" not in unsafe.stderr, "the temporary file's name is not shown"
    assert agent.config_path.read_text() == original
    assert [p.name for p in agent.config_path.parent.iterdir()] == ["config.toml"]

    # A file that cannot be read is an error when reading it, before anything is edited or written (a failed read
    # once counted as its end: the part read so far would have been written back).
    unreadable = agent.base / "unreadable.toml"
    unreadable.mkdir()
    failed = agent.authctl("accounts", "add", "x", "--issuer", "https://login.example.com", "--client-id", "c",
                           "--config", str(unreadable))
    assert failed.returncode == 8 and f"authctl: cannot read {unreadable}: Is a directory" in failed.stderr, failed

    # A preset that needs a client secret, with no terminal to ask on.
    no_tty = agent.authctl("accounts", "add", "gh", "--preset", "github", "--client-id", "Iv1.abc")
    assert no_tty.returncode == 2 and "--client-secret-stdin" in no_tty.stderr

    secret = "GOCSPX-not-in-argv"
    fresh = agent.base / "fresh" / "auth-agent" / "config.toml"
    google = agent.authctl("accounts", "add", "gmail", "--preset", "google", "--client-id", "id.apps.googleusercontent.com",
                           "--client-secret-stdin", "--config", str(fresh), "--json", input=secret + "\n")
    assert google.returncode == 0, google.stderr
    result = json.loads(google.stdout)
    assert result["account"] == "gmail" and result["checked"] is True and result["config"] == str(fresh)
    assert result["redirect_uri"] == "http://127.0.0.1/oauth2/callback/gmail"
    assert file_mode(fresh) == 0o600 and file_mode(fresh.parent) == 0o700 and file_mode(fresh.parent.parent) == 0o700
    written = fresh.read_text()
    assert f'client_secret = "{secret}"' in written
    assert 'extra_auth_params = { access_type = "offline", prompt = "consent" }' in written
    check = subprocess.run([str(bin_dir() / "auth-agent"), "--check-config", "--config", str(fresh)],
                           capture_output=True, text=True, timeout=30, env=agent.env)
    assert check.returncode == 0 and "gmail: issuer https://accounts.google.com" in check.stdout, check

    # A config.toml that is a symlink (dotfile managers) is edited where it points and stays a link.
    target = agent.base / "dotfiles" / "config.toml"
    target.parent.mkdir(mode=0o700)
    target.write_text(original)
    target.chmod(0o600)
    link = agent.base / "linked" / "config.toml"
    link.parent.mkdir(mode=0o700)
    link.symlink_to(target)
    linked = agent.authctl("accounts", "add", "lab", "--preset", "gitlab", "--client-id", "app", "--git-host", "gitlab.com",
                           "--config", str(link))
    assert linked.returncode == 0, linked.stderr
    assert link.is_symlink() and 'git_hosts = ["gitlab.com"]' in target.read_text()
    assert "credential.helper '!authctl git-credential'" in linked.stdout

    bad_tenant = agent.authctl("accounts", "add", "m", "--preset", "microsoft", "--tenant", "contoso.com", "--client-id", "c")
    assert bad_tenant.returncode == 2 and "tenant ID (a GUID" in bad_tenant.stderr


# ----------------------------------------------------------------------------------------------------------------
# Colour, help and output formats


def test_colour_only_on_a_terminal_and_never_with_no_color_or_dumb_terminals(signed_in_agent):
    agent = signed_in_agent
    authctl = str(bin_dir() / "authctl")
    for verb in (["status"], ["doctor"]):
        rc, tty_out = run_in_pty([authctl, *verb], env=dict(agent.env, TERM="xterm"))
        assert rc in (0, 1) and ESC + "32m" in tty_out, f"{verb}: colour on a terminal:\n{tty_out!r}"
        for extra in ({"NO_COLOR": "1"}, {"TERM": "dumb"}):
            rc, plain = run_in_pty([authctl, *verb], env={**agent.env, "TERM": "xterm", **extra})
            assert "signed in" in plain or "ok" in plain
            assert ESC not in plain, f"{verb} with {extra}: {plain!r}"
        piped = agent.authctl(*verb)
        assert ESC not in piped.stdout + piped.stderr


@pytest.mark.parametrize("fast_path", ["require", "off"])
def test_output_that_cannot_be_written_is_a_failure(signed_in_agent, fast_path):
    """A token that never reached its reader (a full disk; here /dev/full) is exit 1 with a message, not exit 0, on
    both parsers' paths."""
    agent = signed_in_agent
    for args in (["token", "work"], ["status"]):
        if args[0] != "token" and fast_path == "require":
            continue
        with open("/dev/full", "w") as full:
            result = subprocess.run([str(agent.bins / "authctl"), *args], env=dict(agent.env, AUTHCTL_FAST_PATH=fast_path),
                                    stdin=subprocess.DEVNULL, stdout=full, stderr=subprocess.PIPE, text=True, timeout=60)
        assert result.returncode == 1, (args, result.returncode, result.stderr)
        assert "authctl: cannot write the output: No space left on device" in result.stderr, result.stderr


def test_status_output_human_and_json(signed_in_agent, auth_server):
    human = signed_in_agent.authctl("status")
    assert human.returncode == 0 and human.stderr == ""
    text = human.stdout
    assert re.search(r"^auth-agent \S+ \(protocol 1\), pid \d+, up \d+s$", text, re.M), text
    assert re.search(r"^access token: +expires in (59m \d+s|1h 0m)$", text, re.M), text
    assert re.search(r"^last refresh: +(just now|\d+s ago)$", text, re.M), text
    data = signed_in_agent.status_json()
    assert set(data) == {"agent", "accounts", "view"} and data["view"] == "desktop", data.keys()
    assert {"version", "protocol", "pid", "uptime_s", "socket", "keyring", "hostname"} <= set(data["agent"])
    work = data["accounts"][0]
    assert work["signed_in"] is True and work["access_token_expires_in"] > 3500


def help_of(program: str, *verb: str) -> subprocess.CompletedProcess:
    """`program VERB... --help` as a script sees it: off a terminal, 80 columns wide (COLUMNS, when set, overrides the
    width ArgumentParser wraps to)."""
    return subprocess.run([str(bin_dir() / program), *verb, "--help"], capture_output=True, text=True, timeout=30,
                          env={**os.environ, "COLUMNS": "80"})


@pytest.mark.parametrize("verb", [["doctor"], ["accounts", "add"], ["accounts", "remove"], ["accounts"], ["token"],
                                  ["git-credential"], ["kube-credential"], []])
def test_help_texts_have_examples(verb):
    result = help_of("authctl", *verb)
    assert result.returncode == 0, result.stderr
    assert re.search(r"^ *Examples?:|^ *Set it up|^ *In a kubeconfig", result.stdout, re.M), result.stdout
    assert "authctl" in result.stdout


HELP_VERBS = [[], ["status"], ["login"], ["logout"], ["token"], ["accounts"], ["accounts", "add"], ["accounts", "remove"],
              ["doctor"], ["git-credential"], ["kube-credential"], ["callback"], ["register-scheme"], ["audit"],
              ["pending"], ["approve"], ["deny"], ["forget"], ["reload"], ["version"]]


@pytest.mark.parametrize("verb", [["authctl", *verb] for verb in HELP_VERBS] + [["auth-agent"]],
                         ids=lambda verb: "-".join(verb))
def test_help_texts_read_cleanly_at_80_columns(verb):
    """Off a terminal help is 80 columns wide (ArgumentParser wraps every line to at most 79 characters): paragraphs
    are one logical line that ArgumentParser fills, and examples fit, so nothing is broken in two at random."""
    result = help_of(*verb)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.split("USAGE:")[0].splitlines()
    in_examples = False
    for index, line in enumerate(lines):
        assert len(line) <= 79, line
        following = lines[index + 1] if index + 1 < len(lines) else ""
        if re.match(r"Examples?:$", line.strip()):
            in_examples = True
        elif not line.strip():
            in_examples = False
        elif in_examples:
            assert line.startswith(" "), f"an example line wrapped at 80 columns: {line!r}"
        elif not line.startswith(" ") and following.strip() and not following.startswith(" "):
            # Inside a paragraph ArgumentParser fills each line: the next line's first word did not fit on this one.
            assert len(line) + 1 + len(following.split()[0]) > 79, f"a paragraph broken early: {line!r}, {following!r}"


def test_man_page_examples_fit_an_80_column_terminal():
    """`man authctl` at 80 columns: a subcommand's section is indented (13 columns, `accounts add` more), and no
    example line in it runs over into a second line. Reads the committed page (`make man` writes it)."""
    page = "authctl.1"
    result = subprocess.run(["man", "-l", str(REPO / "docs" / "man" / page)], capture_output=True, text=True,
                            timeout=30, env={**os.environ, "MANWIDTH": "80", "MANPAGER": "cat", "PAGER": "cat",
                                 # man-db's seccomp filter fails under some container runtimes; the page is ours
                                 "MAN_DISABLE_SECCOMP": "1"})
    assert result.returncode == 0, result.stderr
    lines = re.sub(".\b", "", result.stdout).expandtabs().splitlines()  # no overstrike (bold, underline)
    blocks = 0
    base = None
    for index, line in enumerate(lines):
        indent = len(line) - len(line.lstrip())
        if re.fullmatch(r"Examples?:", line.strip()):
            blocks, base = blocks + 1, indent
        elif not line.strip():
            base = None
        elif base is not None:
            assert indent > base, f"{page}: an example wrapped at 80 columns: {lines[index - 1].strip()!r} / {line!r}"
    assert blocks >= 5, f"{page}: only {blocks} example blocks found"


def test_accounts_help_lists_the_subcommands_and_the_root_lists_doctor():
    accounts = help_of("authctl", "accounts")
    for sub in ("list", "add", "remove"):
        assert re.search(rf"^\s+{sub}\b", accounts.stdout, re.M), accounts.stdout
    root = help_of("authctl")
    assert re.search(r"^\s+doctor\s+Check the agent", root.stdout, re.M), root.stdout


def test_login_on_a_terminal_counts_down_and_ends_with_who_and_scopes(agent):
    rc, out = run_in_pty([str(bin_dir() / "authctl"), "login", "work"], env={**agent.env, "TERM": "xterm"}, timeout=60)
    assert rc == 0, out
    assert "Opened your browser to sign in to 'work'" in out and "http://127.0.0.1:" in out
    assert re.search(r"Waiting for you to finish signing in in the browser\.\.\. (30s|29s) left \(Ctrl-C cancels\)", out), out
    final = out.replace("\r\n", "\n").rstrip("\n").split("\n")
    assert re.fullmatch(r"Signed in to 'work' as \S+ \(scopes: [a-z_ ]*openid[a-z_ ]*\)\.", final[-2].split("\r")[-1]), final[-2:]
    assert re.fullmatch(r"The access token expires in (59m \d+s|1h 0m); the agent refreshes it as needed\.", final[-1]), final
    # Not a terminal: no countdown (logs and pipes get the plain text once).
    agent.authctl("logout", "work")
    piped = agent.authctl("login", "work")
    assert piped.returncode == 0 and "left (Ctrl-C cancels)" not in piped.stderr
    assert "Waiting for the sign-in to finish (gives up after 30s; Ctrl-C cancels)..." in piped.stderr


# ----------------------------------------------------------------------------------------------------------------
# The fast path: `token`, `git-credential` and `kube-credential` parsed without ArgumentParser must be indistinguishable from it.
# AUTHCTL_FAST_PATH=require proves the fast path ran (it refuses lines it would leave to ArgumentParser);
# AUTHCTL_FAST_PATH=off makes ArgumentParser parse every line.

FAST = {"AUTHCTL_FAST_PATH": "require"}
SLOW = {"AUTHCTL_FAST_PATH": "off"}


def comparable(result: subprocess.CompletedProcess, json_out: bool = False) -> tuple:
    """(exit code, stdout, stderr); `token --json`'s expires_in counts down between the runs, expires_at does not."""
    out = result.stdout
    if json_out and result.returncode == 0:
        data = json.loads(out)
        assert isinstance(data.pop("expires_in"), int)
        out = json.dumps(data, sort_keys=True)
    return result.returncode, out, result.stderr


def assert_paths_agree(agent, args: list[str], fast: bool = True, input: str | None = None, env: dict | None = None):
    """Runs authctl ARGS both ways; `fast`: whether the fast path must take the line. Returns the fast run."""
    base = {**(env or {})}
    fast_run = agent.authctl(*args, input=input, env={**base, **FAST})
    if not fast:
        assert fast_run.returncode == 2 and "AUTHCTL_FAST_PATH=require" in fast_run.stderr, (args, fast_run.stderr)
        fast_run = agent.authctl(*args, input=input, env=base)
    slow_run = agent.authctl(*args, input=input, env={**base, **SLOW})
    json_out = "--json" in args
    a, b = comparable(fast_run, json_out), comparable(slow_run, json_out)
    # Never print stdout on a mismatch: it holds a token.
    assert a[0] == b[0] and a[2] == b[2], (args, a[0], b[0], a[2], b[2])
    assert a[1] == b[1], (args, "stdout differs between the fast path and ArgumentParser")
    return fast_run


def test_fast_path_prints_the_same_tokens_as_argument_parser(signed_in_agent):
    agent = signed_in_agent
    plain = assert_paths_agree(agent, ["token", "work"])
    assert plain.returncode == 0 and plain.stdout.count("\n") == 1 and len(plain.stdout) > 10
    assert assert_paths_agree(agent, ["token", "work", "--header"]).stdout.startswith("Authorization: Bearer ")
    for args in (["token", "--min-valid", "600", "work"], ["token", "work", "--min-valid=0", "--json"],
                 ["token", "work", "--id-token"], ["token", "work", "--json", "--id-token"],
                 ["token", "--socket", str(agent.socket_path), "work"],
                 # kubectl runs its exec plugin for every command: the same ExecCredential either way.
                 ["kube-credential", "work"], ["kube-credential", "work", "--access-token", "--min-valid", "0"]):
        assert assert_paths_agree(agent, args).returncode == 0, args


def test_fast_path_fails_exactly_like_argument_parser(signed_in_agent, tmp_path):
    agent = signed_in_agent
    unknown = assert_paths_agree(agent, ["token", "nope"])
    assert unknown.returncode == 8 and "authctl accounts" in unknown.stderr and unknown.stdout == ""
    unsatisfiable = assert_paths_agree(agent, ["token", "work", "--min-valid", "40000000"])
    assert unsatisfiable.returncode != 0 and unsatisfiable.stdout == ""
    gone = assert_paths_agree(agent, ["token", "work"], env={"AUTH_AGENT_SOCKET": str(tmp_path / "none.sock")})
    assert gone.returncode == 3 and "not running" in gone.stderr
    nowhere = assert_paths_agree(agent, ["token", "work"], env={"XDG_RUNTIME_DIR": "", "AUTH_AGENT_SOCKET": ""})
    assert nowhere.returncode == 3 and "XDG_RUNTIME_DIR" in nowhere.stderr


def test_lines_the_fast_path_leaves_to_argument_parser_behave_as_before(signed_in_agent):
    agent = signed_in_agent
    for args, code in ((["token"], 2), (["token", "--help"], 0), (["token", "help"], None), (["token", "work", "--bogus"], 2),
                       (["token", "work", "--header", "--id-token"], 2), (["token", "work", "--min-valid", "-5"], 2),
                       (["token", "work", "--json", "--json"], None), (["token", "--", "work"], None),
                       (["git-credential", "--account", "work", "--username", "", "get"], 2),
                       (["kube-credential"], 2), (["kube-credential", "work", "--min-valid", "-1"], 2),
                       (["kube-credential", "--help"], 0)):
        result = assert_paths_agree(agent, args, fast=False, input="\n")
        assert code is None or result.returncode == code, (args, result.returncode, result.stderr)


def test_fast_path_needs_sign_in_like_argument_parser(agent):
    result = assert_paths_agree(agent, ["token", "work"])
    assert result.returncode == 4 and result.stdout == "" and "sign" in result.stderr.lower()


def test_fast_path_git_credential_matches_argument_parser(signed_in_agent):
    agent = signed_in_agent
    request = "protocol=https\nhost=git.example.com\npath=team/repo.git\n\n"
    got = assert_paths_agree(agent, ["git-credential", "--account", "work", "get"], input=request)
    assert got.returncode == 0 and got.stdout.startswith("username=oauth2\npassword=") and got.stdout.endswith("\n\n")
    other = assert_paths_agree(agent, ["git-credential", "--username=x-access-token", "--account=work", "--min-valid", "0", "get"],
                               input=request)
    assert other.returncode == 0 and other.stdout.startswith("username=x-access-token\n")
    for action in ("store", "erase", "frobnicate"):
        quiet = assert_paths_agree(agent, ["git-credential", "--account", "work", action], input=request)
        assert (quiet.returncode, quiet.stdout) == (0, ""), action
    unmapped = assert_paths_agree(agent, ["git-credential", "get"], input=request)
    assert unmapped.returncode == 8 and unmapped.stdout == ""
    plain_http = assert_paths_agree(agent, ["git-credential", "--account", "work", "get"],
                                    input="protocol=http\nhost=git.example.com\n\n")
    assert plain_http.returncode == 1 and plain_http.stdout == ""
