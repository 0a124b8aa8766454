"""The real user manager stage: the binaries in AUTH_AGENT_BIN_DIR (default of scripts/usermanager-stage: the release
build) installed with `make install BUILT=...` by an ordinary user with a PAM login session, in a container that
boots the host's own tree with systemd as PID 1 (container.py, user_session.py).

Run (as root):  scripts/usermanager-stage   or
                AUTH_AGENT_BIN_DIR=.build/release .venv/bin/python -m pytest Tests/usermanager -p no:cacheprovider

The tests run in file order against one container and one user, like a person working through a session: the
numbered files install, sign in, exercise the unit, break and fix the configuration, then log out and uninstall.
Each test restores the state it changed (an xfail included), so a failure does not cascade. Every wait is bounded;
the container, the auth server and the login session are stopped by pid at the end.
"""
from __future__ import annotations

import os
import shlex
import shutil
from pathlib import Path

import pytest

from container import Container
from e2e_helpers import REPO, AuthServer, default_account, pytest_assertrepr_compare, render_config, short_tmpdir
from user_session import REPO_INSIDE, UserSession

__all__ = ["pytest_assertrepr_compare"]  # token-shaped strings never appear in a failed comparison's output

USER = "aauser"
KEYRING_PASSWORD = "usermanager-stage-keyring"
# Where the container sees what the host shares (the repo may live where an ordinary user cannot read, e.g. /root).
BIN_INSIDE = "/srv/aa-bin"
SHARE_INSIDE = "/srv/aa-share"
BROWSER_LOG = f"{SHARE_INSIDE}/browser.log"
BROWSER_DUMP = f"{SHARE_INSIDE}/browser-proc.txt"
CONFIG = f"/home/{USER}/.config/auth-agent/config.toml"


def bin_dir() -> Path:
    value = os.environ.get("AUTH_AGENT_BIN_DIR")
    if not value:
        pytest.fail("AUTH_AGENT_BIN_DIR is not set (the directory with the auth-agent and authctl to install)",
                    pytrace=False)
    path = Path(value).resolve()
    for name in ("auth-agent", "authctl"):
        if not os.access(path / name, os.X_OK):
            pytest.fail(f"{path / name} is missing or not executable", pytrace=False)
    return path


@pytest.fixture(scope="session")
def auth_server(tmp_path_factory):
    server = AuthServer(tmp_path_factory.mktemp("authserver"))
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def container(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.fail("the user manager stage boots a container: run it as root", pytrace=False)
    bins = bin_dir()
    base = short_tmpdir("aa-um-")
    share = base / "share"
    share.mkdir()
    box = Container(base, binds={str(REPO): REPO_INSIDE, str(bins): BIN_INSIDE},
                    rw_binds={str(share): SHARE_INSIDE})
    try:
        box.boot()
        print(f"container booted in {box.boot_seconds:.1f} s (PID 1 = {box.pid1})")
        yield box
    finally:
        try:
            box.stop()
        finally:
            kept = tmp_path_factory.mktemp("stage-console")
            shutil.copy(box.console, kept / "console.log")
            print(f"container console kept: {kept / 'console.log'}")
            shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="session")
def share(container) -> Path:
    return container.base / "share"


@pytest.fixture(scope="session")
def user(container, share, auth_server, tmp_path_factory):
    """The logged-in user, with an unlocked `login` keyring and the scripted browser in the user manager's
    environment (what a desktop session's environment.d or import-environment would put there)."""
    session = UserSession(container, USER).create()
    os.chown(share, session.uid, session.uid)
    try:
        session.login()
        # gnome-keyring 42 quirk: a `login` collection that the control socket's UNLOCK creates (first login) is not
        # seen by the already running Secret Service; after a restart the same UNLOCK opens it, as at a later login.
        session.unlock_keyring(KEYRING_PASSWORD)
        session.check("systemctl --user restart gnome-keyring-daemon.service")
        session.unlock_keyring(KEYRING_PASSWORD)
        alias, locked = session.keyring_state()
        assert alias == 'o "/org/freedesktop/secrets/collection/login"', f"default collection: {alias!r}"
        assert locked == "b false", f"login collection Locked: {locked!r}"
        session.check("systemctl --user set-environment " + shlex.join([
            f"BROWSER={REPO_INSIDE}/Tests/Fixtures/browser/fake-browser", "FAKE_BROWSER_PYTHON=/usr/bin/python3",
            f"FAKE_BROWSER_LOG={BROWSER_LOG}", f"FAKE_BROWSER_PROC_DUMP={BROWSER_DUMP}"]))
        yield session
    finally:
        keep_logs(session, container, tmp_path_factory)
        session.end()


def write_config(session: UserSession, server: AuthServer, accounts: dict | None = None, **agent):
    """The user's config.toml: account `work` on the test server unless `accounts` says otherwise."""
    accounts = accounts if accounts is not None else {"work": default_account(server.issuer)}
    session.write_file(CONFIG, render_config(accounts, {"log_level": "debug", **agent}))


def keep_logs(session: UserSession, container: Container, tmp_path_factory):
    """The user's journal, where pytest keeps its temp dirs (for a failed stage)."""
    kept = tmp_path_factory.mktemp("stage-logs")
    try:
        if session.uid is not None and container.pid1:
            result = container.run(["journalctl", "--no-pager", "-o", "short-precise", f"_UID={session.uid}"],
                                   timeout=30)
            (kept / "journal.txt").write_text(result.stdout)
    except Exception as e:  # diagnostics only
        print(f"could not save the journal: {e}")
    print(f"stage logs kept in {kept}")


@pytest.fixture(scope="session")
def installed(user, auth_server):
    """`make install BUILT=...` as the user, from the repo, then the account in config.toml (README's order: nothing
    contacts the agent during the install); the home tree from just before it (for uninstall)."""
    before = user.tree()
    output = user.check(f"make -C {REPO_INSIDE} install BUILT={BIN_INSIDE}", timeout=120)
    write_config(user, auth_server)
    return {"tree_before": before, "output": output}


def ensure_running(user: UserSession, timeout: float = 15) -> int:
    """Starts the agent the way a client does (socket activation by `authctl status`); its MainPID."""
    result = user.run("authctl status", timeout=timeout)
    assert result.returncode == 0, f"authctl status failed ({result.returncode}): {result.stderr.strip()}"
    user.wait_active("auth-agent.service", timeout)
    return user.main_pid()
