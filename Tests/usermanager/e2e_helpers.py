"""The e2e suite's helpers (Tests/e2e/conftest.py: the test authorization server, config rendering, bounded waits),
imported under another module name: both directories have a `conftest`, and pytest imports ours as `conftest`.
Only plain helpers are used from it; its fixtures are not registered here."""
import importlib.util
import sys
from pathlib import Path

_PATH = Path(__file__).resolve().parents[1] / "e2e" / "conftest.py"
sys.path.append(str(_PATH.parent))  # for the plain modules it imports (keyring_unlock); ours come first
_spec = importlib.util.spec_from_file_location("_e2e_conftest", _PATH)
_module = importlib.util.module_from_spec(_spec)
sys.modules["_e2e_conftest"] = _module
_spec.loader.exec_module(_module)

from _e2e_conftest import (  # noqa: E402
    CLIENT_ID, FAKE_BROWSER, REPO, AuthServer, default_account, pid_alive, pytest_assertrepr_compare, render_config,
    short_tmpdir, wait_for,
)

__all__ = ["CLIENT_ID", "FAKE_BROWSER", "REPO", "AuthServer", "default_account", "pid_alive",
           "pytest_assertrepr_compare", "render_config", "short_tmpdir", "wait_for"]
