"""Sign-in through the browser as on a desktop: the agent starts $BROWSER (the scripted fake browser, from the user
manager's environment) through `systemd-run --user`, outside its own unit and seccomp filters; the refresh token
lands in the session's real gnome-keyring, in the `login` collection."""
import re

import pytest

from conftest import BROWSER_DUMP, BROWSER_LOG, SHARE_INSIDE, ensure_running

TOKEN = re.compile(r"^[A-Za-z0-9._~+/=-]{16,}$")
OLD_DISPLAY, DISPLAY = ":76", ":77"


def dump_sections(text: str) -> dict:
    """The fake browser's /proc dump (FAKE_BROWSER_PROC_DUMP) as {section: [lines]}."""
    sections, current = {}, None
    for line in text.splitlines():
        if line.startswith("== "):
            current = sections.setdefault(line[3:], [])
        elif current is not None and line:
            current.append(line)
    return sections


class SignIn:
    """What one `authctl login` left behind. Its repr says nothing: pytest prints fixture values in tracebacks, and
    the browser's argv holds the authorization URL (state, PKCE challenge)."""

    def __init__(self, result, cursor: str, log: str, dump: dict):
        self.result, self.cursor, self.log, self.dump = result, cursor, log, dump

    def __repr__(self):
        return "<SignIn>"


@pytest.fixture(scope="module")
def sign_in(user, installed, share):
    """`authctl login work` once for this module. The agent started while an earlier graphical session's DISPLAY
    was in the user manager's environment; a new session has imported its own DISPLAY since (the agent, a user
    service, outlives graphical sessions), and the sign-in's browser must open on that one."""
    for name in (BROWSER_LOG, BROWSER_DUMP):
        (share / name.removeprefix(SHARE_INSIDE + "/")).unlink(missing_ok=True)
    user.check(f"DISPLAY={OLD_DISPLAY} systemctl --user import-environment DISPLAY")
    user.check("systemctl --user stop auth-agent.service")
    ensure_running(user)
    user.check(f"DISPLAY={DISPLAY} systemctl --user import-environment DISPLAY")
    cursor = user.journal_cursor()
    result = user.run("authctl login work", timeout=60)
    log, dump = share / "browser.log", share / "browser-proc.txt"
    sections = dump_sections(dump.read_text(errors="replace")) if dump.exists() else {}
    sections.pop("cmdline", None)
    yield SignIn(result, cursor, log.read_text() if log.exists() else "", sections)
    user.check("systemctl --user unset-environment DISPLAY")


def status_fields(lines) -> dict:
    return dict(line.split(":", 1) for line in lines if ":" in line)


def filters_of(user, pid: int) -> dict:
    """Seccomp, Seccomp_filters and NoNewPrivs of a process of the user, as ints."""
    out = user.check(f"grep -E '^(Seccomp|NoNewPrivs)' /proc/{pid}/status")
    return {key: int(value) for key, value in status_fields(out.splitlines()).items()}


def test_sign_in_through_the_browser(sign_in):
    result = sign_in.result
    assert result.returncode == 0, f"authctl login failed ({result.returncode}): {result.stderr.strip()}"
    assert "START mode=login" in sign_in.log, f"the browser did not run; its log: {sign_in.log!r}"
    assert "DONE login callback=200" in sign_in.log, sign_in.log


def test_browser_runs_outside_the_agents_unit_and_filters(user, sign_in):
    dump = sign_in.dump
    assert dump, "the browser wrote no /proc dump"
    cgroup = " ".join(dump.get("cgroup", []))
    assert "auth-agent.service" not in cgroup, f"the browser runs in the agent's cgroup: {cgroup}"
    assert re.search(r"/app\.slice/run-[^/]+\.service", cgroup), f"not a transient unit of the user manager: {cgroup}"
    # Every process of the container carries nspawn's seccomp filters; the user manager's count is the baseline a
    # transient unit starts from. The agent's unit adds its own (SystemCallFilter=...) and NoNewPrivileges=yes,
    # which its children could never drop.
    browser = {key: int(value) for key, value in status_fields(dump.get("status", [])).items()}
    manager = filters_of(user, int(user.container.run(["systemctl", "show", f"user@{user.uid}.service", "-p",
                                                       "MainPID", "--value"], check=True).stdout))
    agent = filters_of(user, user.main_pid())
    assert agent["NoNewPrivs"] == 1 and agent["Seccomp_filters"] > manager["Seccomp_filters"], \
        f"the agent's own filters are not visible: agent {agent}, user manager {manager}"
    assert browser.get("NoNewPrivs") == 0, f"the browser runs with no_new_privs: {browser}"
    assert browser.get("Seccomp_filters") == manager["Seccomp_filters"], \
        f"the browser runs under more seccomp filters than the user manager: browser {browser}, manager {manager}"
    journal = user.journal("-o", "cat", after=sign_in.cursor)
    assert "auth-agent: web browser for a sign-in" in journal, "no transient unit was started for the browser"


def test_authctl_token_after_sign_in(user, sign_in):
    result = user.run("authctl token work", timeout=30)
    assert result.returncode == 0, f"authctl token failed ({result.returncode}): {result.stderr.strip()}"
    assert TOKEN.match(result.stdout.strip()), "authctl token printed something that is not a token"


def test_refresh_token_is_in_the_login_keyring(user, sign_in, auth_server):
    items = user.keyring_items(account="work", issuer=auth_server.issuer)
    assert len(items) == 1, f"keyring items for account work: {items}"
    assert items[0].startswith("/org/freedesktop/secrets/collection/login/"), items
    status = user.check("authctl status --json")
    assert re.search(r'"signed_in"\s*:\s*true', status), status


def test_browser_gets_display_from_the_user_manager(sign_in):
    """Issue 19 (f): the DISPLAY imported into the user manager last, not the one the agent started with."""
    environ = sign_in.dump.get("environ", [])
    assert f"DISPLAY={DISPLAY}" in environ, [line for line in environ if "DISPLAY" in line]


def test_doctor_reports_the_display_the_agents_browser_gets(user, installed):
    """Issue 19: `authctl doctor` checks the agent's view (the user manager's environment, which the browser's
    transient unit gets), not authctl's own: run from a shell with no DISPLAY, it still names the imported one."""
    ensure_running(user)
    user.check(f"DISPLAY={DISPLAY} systemctl --user import-environment DISPLAY")
    try:
        shown = user.run("env -u DISPLAY -u WAYLAND_DISPLAY authctl doctor", timeout=60)
        assert f"DISPLAY={DISPLAY} (the user manager's environment)" in shown.stdout, shown.stdout[-1500:]
    finally:
        user.check("systemctl --user unset-environment DISPLAY WAYLAND_DISPLAY")
    missing = user.run(f"DISPLAY={OLD_DISPLAY} authctl doctor", timeout=60)
    assert "no DISPLAY or WAYLAND_DISPLAY in the user manager's environment" in missing.stdout, missing.stdout[-1500:]
    assert "import-environment" in missing.stdout
