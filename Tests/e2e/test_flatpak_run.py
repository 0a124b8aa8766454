"""A real `flatpak run` (issue 46 §4): Flatpak itself makes the sandbox, writes the app's `/.flatpak-info` and the
instance's `bwrapinfo.json`, and runs the app's own authctl against the real agent.

Nothing is downloaded: the module builds, offline and once, a minimal runtime `org.test.Platform` from host files (the
way Flatpak's own tests/make-test-runtime.sh does: the libraries `ldd` names, ldconfig, an empty /usr/etc/ld.so.conf
so `flatpak run` puts /app/lib in the loader's cache, and gdbus as the app's D-Bus client) and an app
`org.example.AuthApp` whose /app/bin holds the
authctl under test (a development build's Swift libraries, which live outside /usr, go to /app/lib; the release
authctl is static and needs none), finished with the `finish-args` docs/INTEGRATIONS.md "Flatpak apps" prints for a
socket client. Both go through `flatpak build-export` into a local repository, `remote-add --no-gpg-verify` and
`flatpak --user install`, in an installation of the module's own (FLATPAK_USER_DIR). Each test runs `flatpak run
--user --command=authctl org.example.AuthApp token work` in the agent's environment (its XDG_RUNTIME_DIR, whose
`auth-agent` directory the app gets read-only, and its private session bus for Flatpak's D-Bus proxy); over the
other door, `flatpak run --talk-name=dev.authagent.Agent --command=gdbus` calls GetAccessToken through the
xdg-dbus-proxy Flatpak starts for the run.

flatpak is a test dependency (scripts/setup): without it the tests fail, they do not skip."""
import json
import os
import re
import shutil
import subprocess
import time

import pytest

from conftest import REPO, SYSTEM_PATH, bin_dir, default_account, render_config
from readme_blocks import recipe_block
from test_identity import audit

pytestmark = pytest.mark.release  # cheap: the build takes ~3 s once per module, each run ~0.1 s; static authctl too

FLATPAK = "/usr/bin/flatpak"
GDBUS = "/usr/bin/gdbus"
NAME, OBJECT, IFACE = "dev.authagent.Agent", "/dev/authagent/Agent1", "dev.authagent.Agent1"
APP = "org.example.AuthApp"
RUNTIME = "org.test.Platform"
BRANCH = "1"


def shared_libraries(binary: str) -> list[str]:
    """The files of the shared libraries `binary` loads (with the dynamic loader), symlinks resolved; none for a
    static executable (the release authctl)."""
    result = subprocess.run(["ldd", binary], capture_output=True, text=True, timeout=30)
    if result.returncode != 0 and "not a dynamic executable" in result.stdout + result.stderr:
        return []
    assert result.returncode == 0, f"ldd {binary}: {result.stderr.strip()}"
    found = []
    for line in result.stdout.splitlines():
        path = line.split("=>", 1)[1] if "=>" in line else line
        path = path.strip().split(" ", 1)[0]
        if path.startswith("/"):
            found.append(path)
    return found


def flatpak(env: dict, *args, timeout: float = 120) -> subprocess.CompletedProcess:
    result = subprocess.run([FLATPAK, *args], env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                            timeout=timeout)
    assert result.returncode == 0, f"flatpak {' '.join(args)}: exit {result.returncode}\n{result.stderr}"
    return result


def socket_finish_args() -> list[str]:
    """The `finish-args` docs/INTEGRATIONS.md gives an app that speaks the socket protocol or runs authctl."""
    block = recipe_block(REPO / "docs" / "INTEGRATIONS.md", "## Flatpak apps", "A Flatpak app reaches the agent", nth=1)
    args = json.loads("{" + block.strip() + "}")["finish-args"]
    assert args == ["--filesystem=xdg-run/auth-agent:ro"], args  # the premise: the socket door, read-only
    return args


@pytest.fixture(scope="module")
def flatpak_install(tmp_path_factory):
    """Builds the runtime and the app into a local repository and installs both; returns the environment entries
    that name the installation (FLATPAK_USER_DIR)."""
    assert os.access(FLATPAK, os.X_OK), "flatpak is not installed: run scripts/setup (apt-get install flatpak)"
    started = time.monotonic()
    authctl = os.path.realpath(bin_dir() / "authctl")
    base = tmp_path_factory.mktemp("flatpak")
    env = {"PATH": SYSTEM_PATH, "HOME": str(base / "home"), "LANG": "C.UTF-8",
           "FLATPAK_USER_DIR": str(base / "installation")}
    (base / "home").mkdir()
    repo = base / "repo"
    assert os.access(GDBUS, os.X_OK), "gdbus is not installed: run scripts/setup (apt-get install libglib2.0-bin)"
    libraries = shared_libraries(authctl)
    app_libraries = [lib for lib in libraries if not os.path.realpath(lib).startswith(("/usr/", "/lib"))]
    host_libraries = sorted({lib for lib in [*libraries, *shared_libraries(GDBUS)] if lib not in app_libraries})

    # The runtime: what becomes the sandbox's /usr. ldconfig lets `flatpak run` build the loader's cache, and an
    # empty etc/ld.so.conf has it write one that includes /app/lib.
    runtime = base / "runtime"
    usr = runtime / "usr"
    (runtime / "files").mkdir(parents=True)  # (build-export wants it; a runtime's tree is usr)
    (usr / "bin").mkdir(parents=True)
    (usr / "lib").mkdir()
    (usr / "etc").mkdir()
    (usr / "lib64").symlink_to("lib")  # the loader's path, /lib64/ld-linux-x86-64.so.2, is /usr/lib64/... inside
    (usr / "etc" / "ld.so.conf").write_text("")
    # (Ubuntu's ldconfig is a script around ldconfig.real; the runtime has no shell.)
    ldconfig = shutil.which("ldconfig.real", path="/usr/sbin:/sbin") or shutil.which("ldconfig", path="/usr/sbin:/sbin")
    shutil.copy(ldconfig, usr / "bin" / "ldconfig")
    shutil.copy(GDBUS, usr / "bin" / "gdbus")  # the app's D-Bus client
    for lib in host_libraries:
        shutil.copy(lib, usr / "lib" / os.path.basename(lib))  # (follows symlinks: the file, by the name ldd uses)
    (runtime / "metadata").write_text(f"[Runtime]\nname={RUNTIME}\n")
    flatpak(env, "build-export", "--no-update-summary", "--disable-sandbox", "--runtime", str(repo), str(runtime),
            BRANCH)
    flatpak(env, "build-update-repo", str(repo))
    flatpak(env, "--user", "remote-add", "--no-gpg-verify", "test-repo", str(repo))
    flatpak(env, "--user", "install", "-y", "--noninteractive", "test-repo", RUNTIME)

    # The app: the authctl under test in /app/bin, its libraries from outside /usr in /app/lib.
    app = base / "app"
    flatpak(env, "build-init", str(app), APP, RUNTIME, RUNTIME, BRANCH)
    (app / "files" / "bin").mkdir()
    (app / "files" / "lib").mkdir()
    shutil.copy(authctl, app / "files" / "bin" / "authctl")
    for lib in app_libraries:
        shutil.copy(lib, app / "files" / "lib" / os.path.basename(lib))
    flatpak(env, "build-finish", "--command=authctl", *socket_finish_args(), str(app))
    flatpak(env, "build-export", "--no-update-summary", "--disable-sandbox", str(repo), str(app), BRANCH)
    flatpak(env, "build-update-repo", str(repo))
    flatpak(env, "--user", "install", "-y", "--noninteractive", "test-repo", APP)
    shown = flatpak(env, "--user", "info", "--show-permissions", APP).stdout
    assert "filesystems=xdg-run/auth-agent:ro;" in shown, shown
    print(f"flatpak runtime and app built and installed in {time.monotonic() - started:.1f} s")
    return {"FLATPAK_USER_DIR": env["FLATPAK_USER_DIR"]}


@pytest.fixture
def flatpak_agent(make_agent, keyring, auth_server, flatpak_install):
    agent = make_agent()
    agent.login("work")
    agent.remember(keyring.secret_tool_lookup("work", auth_server.issuer))
    agent.flatpak_env = {**agent.env, **flatpak_install}
    return agent


def instances(agent) -> set[str]:
    """The instance directories `flatpak run` keeps in the agent's XDG_RUNTIME_DIR (`.flatpak/INSTANCE`; beside them
    `.flatpak/APP-ID` holds the app's state)."""
    directory = agent.runtime / ".flatpak"
    return {p.name for p in directory.iterdir() if p.name.isdigit()} if directory.is_dir() else set()


def flatpak_run(agent, *args, options: tuple = (), command: str = "authctl") -> tuple[subprocess.CompletedProcess, str]:
    """`flatpak run --user OPTIONS --command=COMMAND APP ARGS` in the agent's environment; returns the result and the
    instance id Flatpak gave the run (the one new instance directory, whose `info` names the app). A token it
    printed (authctl's line, gdbus's reply) is remembered, never returned in an assert message.

    Flatpak shows `xdg-run/auth-agent` at the host's path of the agent's XDG_RUNTIME_DIR and sets the app's
    XDG_RUNTIME_DIR to /run/user/UID: on a desktop the two are the same directory, here the agent's is a temp dir,
    so authctl is told where the socket shows (AUTH_AGENT_SOCKET, the host's own path of it)."""
    before = instances(agent)
    argv = [FLATPAK, "run", "--user", "--die-with-parent", f"--env=AUTH_AGENT_SOCKET={agent.socket_path}", *options,
            f"--command={command}", APP, *args]
    result = subprocess.run(argv, env=agent.flatpak_env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                            timeout=60)
    if result.returncode == 0 and args[0] == "token":
        agent.remember(result.stdout.strip())
    token = re.match(r"\('([^']+)',", result.stdout)
    if result.returncode == 0 and token:
        agent.remember(token.group(1))
    new = instances(agent) - before
    assert len(new) == 1, f"flatpak run left {sorted(new)} as new instances; stderr:\n{result.stderr}"
    [instance] = new
    info = (agent.runtime / ".flatpak" / instance / "info").read_text()
    assert f"name={APP}\n" in info, info
    return result, instance


def set_allowed_clients(agent, auth_server, allowed_clients):
    agent.write_config(render_config({"work": default_account(auth_server.issuer, allowed_clients=allowed_clients)}))
    result = agent.authctl("reload", timeout=20)
    assert result.returncode == 0, result.stderr


def test_a_flatpak_app_is_served_by_its_entry_and_refused_by_another_apps(flatpak_agent, auth_server):
    """The app Flatpak runs is named `flatpak:org.example.AuthApp` with the instance Flatpak gave it, in namespaces
    that match the instance's bwrapinfo.json; an account listing it serves it, one listing another app refuses it
    (exit 7) and says which entry would serve it; run without `xdg-run/auth-agent` it does not reach the agent."""
    agent = flatpak_agent
    set_allowed_clients(agent, auth_server, [f"flatpak:{APP}"])
    started = time.monotonic()
    served, instance = flatpak_run(agent, "token", "work")
    took = time.monotonic() - started
    assert served.returncode == 0, served.stderr
    assert served.stdout.strip(), "flatpak run printed no token"
    entry = audit(agent)[-1]
    assert (entry["outcome"], entry["reason"]) == ("granted", "listed"), entry
    assert entry["caller"]["flatpak_app"] == APP, entry
    assert entry["caller"]["flatpak_instance"] == instance, entry
    assert entry["caller"]["kind"] == "flatpak" and "not_contained" not in entry["caller"], entry
    assert (agent.runtime / ".flatpak" / instance / "bwrapinfo.json").is_file(), "no record to check it against"
    # Its executable shows as /app/bin/authctl, a path of the sandbox's: not "deleted" for the agent's lacking it.
    assert (entry["caller"]["exe"], entry["caller"].get("exe_deleted")) == ("/app/bin/authctl", None), entry
    shown = agent.authctl("audit").stdout
    [line] = [l for l in shown.splitlines() if f"flatpak:{APP} (instance {instance})" in l]
    print(f"flatpak run took {took:.1f} s; audit: {line}")

    set_allowed_clients(agent, auth_server, ["flatpak:org.example.OtherApp"])
    refused, other_instance = flatpak_run(agent, "token", "work")
    assert refused.stdout == "", "served by an entry naming another app"  # (never print what it got)
    assert refused.returncode == 7, refused.stderr
    assert f"add \"flatpak:{APP}\"" in refused.stderr, refused.stderr
    entry = audit(agent)[-1]
    assert (entry["outcome"], entry["reason"]) == ("denied", "not_listed"), entry
    assert (entry["caller"]["flatpak_app"], entry["caller"]["flatpak_instance"]) == (APP, other_instance), entry
    assert other_instance != instance

    # The door is the permission the docs give: without it the socket is not there for the app, and the agent
    # hears nothing. The app is told which permission it lacks, not that the agent is not running (issue 54).
    entries = len(audit(agent))
    shut, _ = flatpak_run(agent, "token", "work", options=("--nofilesystem=xdg-run/auth-agent",))
    assert shut.stdout == "", "served without the socket's directory"  # (never print what it got)
    assert shut.returncode == 3, (shut.returncode, shut.stderr)
    assert f"inside the Flatpak sandbox of {APP}, which cannot see the agent's socket" in shut.stderr, shut.stderr
    assert f"flatpak override --user --filesystem=xdg-run/auth-agent:ro {APP}" in shut.stderr, shut.stderr
    assert "systemctl" not in shut.stderr, shut.stderr
    assert len(audit(agent)) == entries


def test_a_flatpak_apps_dbus_calls_are_named_by_the_proxy_flatpak_runs(flatpak_agent, auth_server):
    """The other door: the app's `gdbus` calls GetAccessToken on the session bus Flatpak gives it, its own
    xdg-dbus-proxy, which Flatpak starts with the app's `/.flatpak-info` in its root. With `--talk-name=` the agent
    names the app with the run's instance (not the proxy) and serves it by its `flatpak:` entry, refuses it under
    another app's; without the permission the proxy answers ServiceUnknown and the call never reaches the agent."""
    agent = flatpak_agent
    call = ["call", "--session", "--dest", NAME, "--object-path", OBJECT, "--method", f"{IFACE}.GetAccessToken",
            "--timeout", "60", "work", "0"]
    talk = (f"--talk-name={NAME}",)
    set_allowed_clients(agent, auth_server, [f"flatpak:{APP}"])
    served, instance = flatpak_run(agent, *call, options=talk, command="gdbus")
    assert served.returncode == 0, served.stderr
    assert re.match(r"\('[^']+', int64 \d+\)", served.stdout), "not GetAccessToken's reply"  # (never print it)
    entry = audit(agent)[-1]
    assert (entry["outcome"], entry["reason"]) == ("granted", "listed"), entry
    caller = entry["caller"]
    assert (caller["via"], caller["flatpak_app"], caller["flatpak_instance"]) == ("dbus", APP, instance), caller
    assert caller["kind"] == "flatpak" and "not_contained" not in caller, caller
    [line] = [l for l in agent.authctl("audit").stdout.splitlines() if f"flatpak:{APP} (instance {instance})" in l]
    print(f"audit over D-Bus: {line}")

    set_allowed_clients(agent, auth_server, ["flatpak:org.example.OtherApp"])
    refused, _ = flatpak_run(agent, *call, options=talk, command="gdbus")
    assert refused.returncode != 0 and refused.stdout == "", "served by an account naming another app"
    assert "dev.authagent.Error.AccessDenied" in refused.stderr, refused.stderr
    entry = audit(agent)[-1]
    assert (entry["outcome"], entry["reason"], entry["caller"]["flatpak_app"]) == ("denied", "not_listed", APP), entry

    entries = len(audit(agent))
    set_allowed_clients(agent, auth_server, [f"flatpak:{APP}"])
    shut, _ = flatpak_run(agent, *call, command="gdbus")
    assert shut.returncode != 0 and shut.stdout == "", "the call went through without --talk-name"
    assert "org.freedesktop.DBus.Error.ServiceUnknown" in shut.stderr, shut.stderr
    assert len(audit(agent)) == entries, "the call reached the agent"
