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
other door, `flatpak run --command=gdbus`, given `--talk-name=dev.authagent.Agent` by `flatpak override`, calls
GetAccessToken through the xdg-dbus-proxy Flatpak starts for the run. The section's `flatpak override` and "git in a Flatpak IDE" commands run as
printed, with this app's id for the example ids (the runtime also holds git and a shell for the latter).

flatpak is a test dependency (scripts/setup): without it the tests fail, they do not skip."""
import json
import os
import re
import shlex
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
GIT = "/usr/bin/git"
SH = "/bin/dash"
DOC = REPO / "docs" / "INTEGRATIONS.md"
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
    block = recipe_block(DOC, "## Flatpak apps", "A Flatpak app reaches the agent", nth=1)
    args = json.loads("{" + block.strip() + "}")["finish-args"]
    assert args == ["--filesystem=xdg-run/auth-agent:ro"], args  # the premise: the socket door, read-only
    return args


def printed(label: str, nth: int, words: str) -> list[str]:
    """The command of docs/INTEGRATIONS.md's "Flatpak apps" block `nth` after the paragraph starting with `label`
    whose line holds `words`, as argv, with this module's app for the example ids."""
    block = recipe_block(DOC, "## Flatpak apps", label, nth=nth)
    [line] = [line for line in block.splitlines() if words in line]
    return [APP if word in ("org.example.App", "com.example.IDE") else word for word in shlex.split(line)]


def run_printed(agent, argv: list[str]) -> subprocess.CompletedProcess:
    """A printed `flatpak ...` command, run in the agent's environment (`--user` overrides stay in the module's
    installation, FLATPAK_USER_DIR)."""
    assert argv[0] == "flatpak", argv
    return flatpak(agent.flatpak_env, *argv[1:])


def reset_overrides(agent):
    """docs/INTEGRATIONS.md's way to take back what `flatpak override` gave: `flatpak override --user --reset APP-ID`."""
    run_printed(agent, ["flatpak", "override", "--user", "--reset", APP])


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
    assert os.access(GIT, os.X_OK) and os.access(SH, os.X_OK), "git and dash are needed: run scripts/setup"
    host_libraries = sorted({lib for lib in [*libraries, *shared_libraries(GDBUS), *shared_libraries(GIT),
                                             *shared_libraries(SH)] if lib not in app_libraries})

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
    shutil.copy(GIT, usr / "bin" / "git")  # an IDE's git (its `!` credential helpers run through /bin/sh)
    shutil.copy(SH, usr / "bin" / "sh")
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
    shown = flatpak(env, "info", "--show-permissions", APP).stdout  # docs/INTEGRATIONS.md: what an app has
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


def flatpak_run(agent, *args, options: tuple = (), command: str = "authctl",
                input: str | None = None) -> tuple[subprocess.CompletedProcess, str]:
    """`flatpak run --user OPTIONS --command=COMMAND APP ARGS` in the agent's environment; returns the result and the
    instance id Flatpak gave the run (the one new instance directory, whose `info` names the app). A token it
    printed (authctl's line, gdbus's reply) is remembered, never returned in an assert message.

    Flatpak shows `xdg-run/auth-agent` at the host's path of the agent's XDG_RUNTIME_DIR and sets the app's
    XDG_RUNTIME_DIR to /run/user/UID: on a desktop the two are the same directory, here the agent's is a temp dir,
    so authctl is told where the socket shows (AUTH_AGENT_SOCKET, the host's own path of it)."""
    before = instances(agent)
    argv = [FLATPAK, "run", "--user", "--die-with-parent", f"--env=AUTH_AGENT_SOCKET={agent.socket_path}", *options,
            f"--command={command}", APP, *args]
    result = subprocess.run(argv, env=agent.flatpak_env, capture_output=True, text=True, timeout=60,
                            **({"input": input} if input is not None else {"stdin": subprocess.DEVNULL}))
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

    # In the app, `authctl status` and `authctl doctor` say what it is and leave out the desktop's (INTEGRATIONS.md),
    # and a sign-in an account it was given needs is refused (exit 4), to be done on the host with `authctl login`.
    shown, _ = flatpak_run(agent, "status")
    assert shown.returncode == 0, shown.stderr
    assert f"seen as: an app inside its Flatpak sandbox, named flatpak:{APP} in allowed_clients" in shown.stdout, shown.stdout
    assert "keyring:" not in shown.stdout, shown.stdout
    doctor, _ = flatpak_run(agent, "doctor")
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    agent.write_config(render_config({name: default_account(auth_server.issuer, allowed_clients=[f"flatpak:{APP}"])
                                      for name in ("work", "fresh")}))
    assert agent.authctl("reload", timeout=20).returncode == 0
    needs, _ = flatpak_run(agent, "token", "fresh")
    assert needs.returncode == 4 and "run `authctl login fresh` there" in needs.stderr, needs.stderr

    set_allowed_clients(agent, auth_server, ["flatpak:org.example.OtherApp"])
    refused, other_instance = flatpak_run(agent, "token", "work")
    assert refused.stdout == "", "served by an entry naming another app"  # (never print what it got)
    assert refused.returncode == 7, refused.stderr
    assert f"add \"flatpak:{APP}\"" in refused.stderr, refused.stderr
    entry = audit(agent)[-1]
    assert (entry["outcome"], entry["reason"]) == ("denied", "not_listed"), entry
    assert (entry["caller"]["flatpak_app"], entry["caller"]["flatpak_instance"]) == (APP, other_instance), entry
    assert other_instance != instance

    # The door is the permission the docs give: taken away (`flatpak override --nofilesystem`), the socket is not
    # there for the app, and the agent hears nothing. The app is told which permission it lacks, not that the agent
    # is not running (issue 54), and the command that gives it, INTEGRATIONS.md's, opens the door again.
    entries = len(audit(agent))
    set_allowed_clients(agent, auth_server, [f"flatpak:{APP}"])
    flatpak(agent.flatpak_env, "override", "--user", "--nofilesystem=xdg-run/auth-agent", APP)
    try:
        shut, _ = flatpak_run(agent, "token", "work")
        assert shut.stdout == "", "served without the socket's directory"  # (never print what it got)
        assert shut.returncode == 3, (shut.returncode, shut.stderr)
        assert f"inside the Flatpak sandbox of {APP}, which cannot see the agent's socket" in shut.stderr, shut.stderr
        give = printed("A Flatpak app reaches the agent", 2, "--filesystem=xdg-run/auth-agent:ro")
        assert shlex.join(give) in shut.stderr, shut.stderr
        assert "systemctl" not in shut.stderr, shut.stderr
        assert len(audit(agent)) == entries
        run_printed(agent, give)
        again, _ = flatpak_run(agent, "token", "work")
        assert again.returncode == 0, again.stderr
    finally:
        reset_overrides(agent)


def test_a_flatpak_apps_dbus_calls_are_named_by_the_proxy_flatpak_runs(flatpak_agent, auth_server):
    """The other door: the app's `gdbus` calls GetAccessToken on the session bus Flatpak gives it, its own
    xdg-dbus-proxy, which Flatpak starts with the app's `/.flatpak-info` in its root. Given `--talk-name=` by
    docs/INTEGRATIONS.md's `flatpak override` as printed (the app ships none), the agent names the app with the run's
    instance (not the proxy) and serves it by its `flatpak:` entry, refuses it under another app's; once the docs'
    `flatpak override --user --reset` took the permission back, the proxy answers ServiceUnknown and the call never
    reaches the agent."""
    agent = flatpak_agent
    call = ["call", "--session", "--dest", NAME, "--object-path", OBJECT, "--method", f"{IFACE}.GetAccessToken",
            "--timeout", "60", "work", "0"]
    set_allowed_clients(agent, auth_server, [f"flatpak:{APP}"])
    run_printed(agent, printed("A Flatpak app reaches the agent", 2, "--talk-name=dev.authagent.Agent"))
    try:
        served, instance = flatpak_run(agent, *call, command="gdbus")
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
        refused, _ = flatpak_run(agent, *call, command="gdbus")
        assert refused.returncode != 0 and refused.stdout == "", "served by an account naming another app"
        assert "dev.authagent.Error.AccessDenied" in refused.stderr, refused.stderr
        entry = audit(agent)[-1]
        assert (entry["outcome"], entry["reason"], entry["caller"]["flatpak_app"]) == ("denied", "not_listed", APP), entry
    finally:
        reset_overrides(agent)

    entries = len(audit(agent))
    set_allowed_clients(agent, auth_server, [f"flatpak:{APP}"])
    shut, _ = flatpak_run(agent, *call, command="gdbus")
    assert shut.returncode != 0 and shut.stdout == "", "the call went through without --talk-name"
    assert "org.freedesktop.DBus.Error.ServiceUnknown" in shut.stderr, shut.stderr
    assert len(audit(agent)) == entries, "the call reached the agent"


def test_git_in_a_flatpak_ide_is_set_up_and_served_as_integrations_prints(flatpak_agent, auth_server):
    """docs/INTEGRATIONS.md, "git in a Flatpak IDE", as printed with this app for com.example.IDE and the account
    `work` for gitlab: `flatpak override` gives the app the host's /usr and the socket, the helper goes into the IDE's
    own git configuration (`~/.var/app/APP/config/git/config`; the host's git keeps its own), and the IDE's git,
    `flatpak run --command=git`, then gets its password through the helper, served as the app by its `flatpak:`
    entry. The helper names authctl at /run/host/usr/bin/authctl where this computer's /usr/bin/authctl is the one
    under test (the package stage); elsewhere by its absolute path in your home, the docs' other way
    (`--filesystem=~/.local/bin/authctl:ro`, where `make install PREFIX=~/.local` puts it)."""
    agent = flatpak_agent
    set_allowed_clients(agent, auth_server, [f"flatpak:{APP}"])
    label = "**git in a Flatpak IDE**"
    # The lines run on the host, by a shell (for `~`), in the agent's environment.
    on_host = [line.replace("com.example.IDE", APP).replace("--account gitlab", "--account work")
               for line in recipe_block(DOC, "## Flatpak apps", label).splitlines() if not line.startswith("flatpak ")]
    try:
        run_printed(agent, printed(label, 0, "flatpak override"))
        if os.path.realpath(bin_dir() / "authctl") != os.path.realpath("/usr/bin/authctl"):
            installed = agent.home / ".local" / "bin" / "authctl"
            installed.parent.mkdir(parents=True)
            shutil.copy2(bin_dir() / "authctl", installed)
            run_printed(agent, ["flatpak", "override", "--user", "--filesystem=~/.local/bin/authctl:ro", APP])
            on_host = [line.replace("'!/run/host/usr/bin/authctl ", f"'!{installed} ") for line in on_host]
        for line in on_host:
            done = subprocess.run(["sh", "-c", line], env=agent.env, stdin=subprocess.DEVNULL, capture_output=True,
                                  text=True, timeout=60)
            assert done.returncode == 0, (line, done.stderr)
        assert not (agent.home / ".gitconfig").exists(), "the host's git configuration was changed"

        filled, instance = flatpak_run(agent, "credential", "fill", command="git",
                                       input="protocol=https\nhost=gitlab.com\n\n")
        fields = dict(line.split("=", 1) for line in filled.stdout.splitlines() if "=" in line)
        agent.remember(fields.get("password", ""))
        assert filled.returncode == 0, filled.stderr
        assert fields.get("username") == "oauth2" and fields.get("password"), "git got no credential"  # (never print it)
    finally:
        reset_overrides(agent)
    entry = audit(agent)[-1]
    assert (entry["outcome"], entry["reason"]) == ("granted", "listed"), entry
    assert (entry["caller"]["flatpak_app"], entry["caller"]["flatpak_instance"]) == (APP, instance), entry
