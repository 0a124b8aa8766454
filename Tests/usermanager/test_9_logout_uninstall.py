"""The end of the session: logging out stops the user manager and with it a running agent, cleanly; after the next
login, `make uninstall` removes every file `make install` put in the home directory (what is left is the user's
own data: the configuration, the consent store, the keyring)."""
import pytest

from conftest import REPO_INSIDE, ensure_running
from e2e_helpers import wait_for

# The user's data, not the installation's: kept by uninstall, as a package removal keeps files in home directories.
USER_DATA = (".config/auth-agent/", ".local/state/auth-agent/", ".local/share/keyrings/")


def test_logout_stops_the_agent_cleanly(user, installed):
    pid = ensure_running(user)
    box = user.container
    cursor = box.run(["journalctl", "-n", "1", "--show-cursor", "-q", "-o", "cat"]).stdout.split("-- cursor: ")[-1]
    try:
        result = user.logout()
    finally:
        # A hung agent would hold user@UID in "deactivating" for 90 s: end it so the next login works.
        if box.run(["test", "-d", f"/proc/{pid}"]).returncode == 0:
            box.run(["kill", "-KILL", str(pid)])
            wait_for(lambda: user.user_manager_state() in ("inactive", "failed"), 20,
                     f"user@{user.uid}.service to stop once the agent was killed", interval=0.2)
    assert result == "success", f"user@{user.uid}.service ended with Result={result}"
    # The user manager is gone: its log of the agent's unit is read from the system journal, as root.
    journal = box.run(["journalctl", "--no-pager", "-q", "-o", "cat", "--after-cursor", cursor.strip(),
                       f"_UID={user.uid}", "USER_UNIT=auth-agent.service"]).stdout
    assert "Stopped auth-agent.service" in journal, "no clean stop of auth-agent.service in the user manager's log"
    assert "Failed with result" not in journal and "Killing process" not in journal, \
        "the agent did not stop cleanly at logout (stage logs: journal.txt)"


def test_uninstall_leaves_nothing_behind(user, installed):
    if user.session is None:
        user.login()
    sockets = user.show("auth-agent.socket", "ActiveState")
    assert sockets == "active", f"auth-agent.socket after the new login: {sockets}"
    user.check(f"make -C {REPO_INSIDE} uninstall", timeout=60)
    assert user.show("auth-agent.socket", "LoadState") == "not-found"
    assert user.show("auth-agent.service", "LoadState") == "not-found"
    # systemd removes the socket (RemoveOnStop=yes) but not the directory it made for it; /run/user goes at logout.
    runtime = user.host_path(f"{user.runtime_dir}/auth-agent")
    assert not runtime.exists() or not any(runtime.iterdir()), f"left in {runtime}: {list(runtime.iterdir())}"
    added = user.tree() - installed["tree_before"]
    left = sorted(path for path in added if not path.startswith(USER_DATA))
    assert not left, f"left behind by make uninstall: {left}"
