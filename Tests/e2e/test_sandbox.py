"""Sandboxed apps over the socket (issue 46), in a sandbox made with the real bubblewrap the way Flatpak makes one:
`bwrap --unshare-user --disable-userns --unshare-pid`, a tmpfs root holding /usr, /etc, /proc and /dev, the
`/lib`, `/lib64`, `/bin`, `/sbin` symlinks, the app's `/.flatpak-info` from `--ro-bind-data`, and the agent's socket
directory bound in read-only (Flatpak's `--filesystem=xdg-run/auth-agent:ro`). The caller is the real authctl, bound
in read-only at its own path, so the path it shows inside is exactly the host's. The agent, the keyring and the
authorization server are the real ones.

What it shows: the app is named `flatpak:APP-ID` (in the audit) and served by its `flatpak:` entry; an entry naming the
executable path it shows does not serve it; an account without allowed_clients asks about it (served after `authctl
approve`) instead of serving it as "any program of yours"; and the same sandbox without a readable `/.flatpak-info`
is named by no path, so it is refused as `unidentified` by an account that lists the path it shows (in its own pid
namespace and in the agent's), while an account without a policy serves it as the host program's doing it is. bubblewrap is a test dependency (scripts/setup): without it the
tests fail, they do not skip."""
import json
import os
import re
import subprocess

import pytest

from conftest import REPO, default_account, read_until, render_config, wait_for
from readme_blocks import recipe_block
from test_identity import audit, run_in_terminal

pytestmark = pytest.mark.release  # cheap: one sign-in per test; also against the installed package

BWRAP = "/usr/bin/bwrap"
APP = "org.example.App"
INSTANCE = "1234567890"
HOST_OS_AUTHCTL = "/run/host/usr/bin/authctl"  # the host's /usr/bin/authctl in a Flatpak app with host-os:ro
FLATPAK_INFO = f"[Application]\nname={APP}\nruntime=runtime/org.example.Platform/x86_64/1\n\n[Instance]\ninstance-id={INSTANCE}\n"


def app_info(instance: str = INSTANCE, context: str = "", session_bus: str = "") -> str:
    """A `/.flatpak-info` as `flatpak run` writes it (common/flatpak-run.c), with `[Context]` and `[Session Bus Policy]`
    lines."""
    return (f"[Application]\nname={APP}\nruntime=runtime/org.example.Platform/x86_64/1\n\n[Instance]\n"
            f"instance-id={instance}\nsession-bus-proxy=true\n\n[Context]\n{context}\n\n[Session Bus Policy]\n{session_bus}\n")


def authctl_path(agent) -> str:
    """The authctl the tests run, as the kernel names it (symlinks resolved)."""
    return os.path.realpath(agent.bins / "authctl")


def library_dirs(binary: str) -> list[str]:
    """Directories outside /usr of the shared libraries `binary` loads (a development build's Swift runtime); none for
    the release build, which is a static executable."""
    result = subprocess.run(["ldd", binary], capture_output=True, text=True, timeout=30)
    if result.returncode != 0 and "not a dynamic executable" in result.stdout + result.stderr:
        return []
    assert result.returncode == 0, f"ldd {binary}: {result.stderr.strip()}"
    out = result.stdout
    dirs = set()
    for line in out.splitlines():
        if "=>" in line and "/" in line.split("=>", 1)[1]:
            path = os.path.realpath(line.split("=>", 1)[1].split()[0])
            if not path.startswith("/usr/"):
                dirs.add(os.path.dirname(path))
    return sorted(dirs)


def host_tree() -> list[str]:
    """bwrap arguments for the host's /usr and /etc, read-only, and the `/lib`, `/lib64`, `/bin`, `/sbin` links."""
    assert os.access(BWRAP, os.X_OK), "bubblewrap is not installed: run scripts/setup (apt-get install bubblewrap)"
    argv = ["--ro-bind", "/usr", "/usr"]
    for top in ("/lib", "/lib64", "/bin", "/sbin"):
        if os.path.islink(top):
            argv += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            argv += ["--ro-bind", top, top]
    return [*argv, "--ro-bind", "/etc", "/etc"]


def sandboxed(agent, *args, flatpak_info: bool = True, own_pid_namespace: bool = True, info: str = FLATPAK_INFO,
              bwrapinfo=None, command: list[str] | None = None, socket_dir: bool = True) -> subprocess.Popen:
    """`authctl ARGS` in a bwrap sandbox as Flatpak makes one (see the module); with `flatpak_info` false its root has
    no `/.flatpak-info` (else `info`), with `own_pid_namespace` false it runs in the agent's pid namespace. bwrap
    writes its `--info-fd` record where `flatpak run` has it written, the instance's `bwrapinfo.json` in the agent's
    runtime directory (the instance `info` names), or at `bwrapinfo` (a path); `bwrapinfo=False`: nowhere. authctl is also at `/run/host/usr/bin/authctl`, where `--filesystem=host-os:ro` shows the
    host's; `command` runs instead of authctl, with stdin a pipe. With `socket_dir` false the agent's socket
    directory is not bound in (an app without `--filesystem=xdg-run/auth-agent:ro`)."""
    authctl = authctl_path(agent)
    argv = [BWRAP, "--unshare-user", "--disable-userns", *(["--unshare-pid"] if own_pid_namespace else []),
            "--die-with-parent", *host_tree(), "--proc", "/proc", "--dev", "/dev"]
    for directory in library_dirs(authctl):
        argv += ["--ro-bind", directory, directory]
    argv += ["--ro-bind", authctl, authctl, "--ro-bind", authctl, HOST_OS_AUTHCTL]
    if socket_dir:
        argv += ["--ro-bind", str(agent.socket_path.parent), str(agent.socket_path.parent)]
    fds = ()
    if flatpak_info:
        # A memfd, not a pipe: a marker may be larger than a pipe's buffer (nobody reads it before bwrap starts).
        read = os.memfd_create("flatpak-info")
        os.write(read, info.encode())
        os.lseek(read, 0, os.SEEK_SET)
        argv += ["--ro-bind-data", str(read), "/.flatpak-info"]
        fds = (read,)
    if bwrapinfo is None and flatpak_info and (named := re.search(r"^instance-id=(\d+)$", info, re.M)):
        bwrapinfo = agent.runtime / ".flatpak" / named.group(1) / "bwrapinfo.json"
        bwrapinfo.parent.mkdir(parents=True, exist_ok=True)
    if bwrapinfo:
        record = os.open(bwrapinfo, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        argv += ["--info-fd", str(record)]
        fds = (*fds, record)
    try:
        return subprocess.Popen([*argv, *(command or [authctl, *args])], env=agent.env, pass_fds=fds,
                                stdin=subprocess.PIPE if command else subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    finally:
        for fd in fds:
            os.close(fd)


def run_sandboxed(agent, *args, **options) -> subprocess.CompletedProcess:
    proc = sandboxed(agent, *args, **options)
    out, err = proc.communicate(timeout=60)
    if proc.returncode == 0 and args[0] == "token":
        agent.remember(out.strip())
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def set_allowed_clients(agent, auth_server, allowed_clients):
    """Puts `work`'s new allowed_clients in force (reload keeps the sign-in); None: no policy."""
    extra = {} if allowed_clients is None else {"allowed_clients": allowed_clients}
    agent.write_config(render_config({"work": default_account(auth_server.issuer, **extra)}, {"consent_timeout": 60}))
    result = agent.authctl("reload", timeout=20)
    assert result.returncode == 0, result.stderr


@pytest.fixture
def sandbox_agent(make_agent, keyring, auth_server):
    agent = make_agent(agent={"consent_timeout": 60})
    agent.login("work")
    agent.remember(keyring.secret_tool_lookup("work", auth_server.issuer))
    return agent


def test_a_sandboxed_app_is_named_and_served_only_by_its_flatpak_entry(sandbox_agent, auth_server):
    agent = sandbox_agent
    set_allowed_clients(agent, auth_server, [f"flatpak:{APP}"])
    served = run_sandboxed(agent, "token", "work")
    assert served.returncode == 0, served.stderr
    entry = audit(agent)[-1]
    assert (entry["outcome"], entry["reason"]) == ("granted", "listed"), entry
    assert entry["caller"]["flatpak_app"] == APP
    assert entry["caller"]["exe"] == authctl_path(agent), "the premise: it shows the host's path"
    assert f"flatpak:{APP}" in agent.authctl("audit").stdout

    # An entry naming the very path it shows does not serve it: that path is the sandbox's own.
    set_allowed_clients(agent, auth_server, [authctl_path(agent)])
    refused = run_sandboxed(agent, "token", "work")
    assert refused.stdout == "", "served by an entry naming the path it shows"  # (never print what it got)
    assert refused.returncode == 7, refused.stderr
    assert f"add \"flatpak:{APP}\"" in refused.stderr, refused.stderr
    entry = audit(agent)[-1]
    assert (entry["outcome"], entry["reason"], entry["caller"]["flatpak_app"]) == ("denied", "not_listed", APP)


def test_an_account_without_allowed_clients_asks_about_a_sandboxed_app(sandbox_agent):
    agent = sandbox_agent
    status = agent.account_status("work")["access"]
    assert status["open"] is True and "sandboxed apps, containers and forwarded hosts are asked" in status["summary"], status
    assert agent.token("work"), "a host program is served as before"

    # The app is installed here (for this user): its exported desktop file names it.
    exports = agent.home / ".local/share/flatpak/exports/share/applications"
    exports.mkdir(parents=True)
    (exports / f"{APP}.desktop").write_text("[Desktop Entry]\nName=Example App\nExec=example\n")
    waiting = sandboxed(agent, "token", "work")
    try:
        read_until(waiting.stderr, "in a terminal", 30)
        [pending] = json.loads(agent.authctl("pending", "--json").stdout)["requests"]
        assert (pending["account"], pending["client"]) == ("work", f"flatpak:{APP}"), pending
        assert pending["app_name"] == "Example App", pending
        assert '("Example App" as installed)' in agent.authctl("pending").stdout
        assert pending["run"] == "instance 1234567890", "approve --this-run would allow this instance only"
        rc, output = run_in_terminal(agent, "approve", str(pending["id"]))
        assert rc == 0 and "Allowed" in output, output
        out, err = waiting.communicate(timeout=60)
    finally:
        if waiting.poll() is None:
            waiting.kill()
            waiting.wait(timeout=10)
    assert waiting.returncode == 0, err
    agent.remember(out.strip())
    # Remembered: the app is served without a question the next time.
    again = run_sandboxed(agent, "token", "work")
    asked = again.stderr  # (an assert on the CompletedProcess itself would quote the token it printed)
    assert again.returncode == 0, asked
    assert "in a terminal" not in asked, asked
    reasons = [(e["outcome"], e["reason"], e["caller"].get("flatpak_app")) for e in audit(agent)]
    assert reasons == [("granted", "open", None), ("granted", "approved", APP), ("granted", "approved", APP)], reasons


@pytest.mark.parametrize("own_pid_namespace", [True, False], ids=["own-pid-namespace", "agents-pid-namespace"])
def test_a_sandbox_without_flatpak_info_is_named_by_no_path(sandbox_agent, auth_server, own_pid_namespace):
    """Its executable is the host's authctl at the host's path, and authctl is listed; from the host that path is
    served (a listed authctl serves whatever runs it). From the sandbox no path names it: refused by the list as
    `unidentified`. Issue 53: in the agent's pid namespace a root of its own is host code (toolbox, a bwrap a host
    program made): an account without a policy serves it, and the audit says what it was (`host_container`). In a
    pid namespace of its own it is a container (docker/podman shape): never served by "any program of yours"; it is
    asked about when the unit the host gave it names it, and refused as unidentified when nothing does (here)."""
    agent = sandbox_agent
    kind = "container" if own_pid_namespace else "host_container"
    set_allowed_clients(agent, auth_server, [authctl_path(agent)])
    assert agent.token("work"), "the premise: the listed path is served from the host"
    refused = run_sandboxed(agent, "token", "work", flatpak_info=False, own_pid_namespace=own_pid_namespace)
    assert refused.stdout == "", "served by the path it shows"  # (never print what it got)
    assert refused.returncode == 7, refused.stderr
    assert ("pid namespace of its own" if own_pid_namespace else "root directory of its own") in refused.stderr, refused.stderr
    entry = audit(agent)[-1]
    assert (entry["outcome"], entry["reason"]) == ("denied", "unidentified"), entry
    assert entry["caller"]["exe"] == authctl_path(agent) and entry["caller"]["kind"] == kind, entry
    assert "flatpak_app" not in entry["caller"]
    assert json.loads(agent.authctl("pending", "--json").stdout)["requests"] == [], "nothing is asked about it"

    set_allowed_clients(agent, auth_server, None)
    outcome = run_sandboxed(agent, "token", "work", flatpak_info=False, own_pid_namespace=own_pid_namespace)
    entry = audit(agent)[-1]
    assert entry["caller"]["kind"] == kind, entry
    if own_pid_namespace:
        assert outcome.returncode == 7 and outcome.stdout == "", outcome.stderr
        assert "unit" not in entry["caller"], "the premise: no unit names the test's container"
        assert (entry["outcome"], entry["reason"]) == ("denied", "unidentified"), entry
        # Confined: tokens only, whatever it asks.
        for verb in (["logout", "work"], ["reload"], ["pending"], ["audit"], ["forward", "--stop", "h"]):
            refused = run_sandboxed(agent, *verb, flatpak_info=False)
            assert refused.returncode == 9, (verb, refused.stderr)
        assert agent.account_status("work")["signed_in"] is True
    else:
        agent.remember(outcome.stdout.strip())
        assert outcome.returncode == 0, outcome.stderr
        assert (entry["outcome"], entry["reason"]) == ("granted", "open"), entry


def oversized_info(size: int = 70_990, context: str = "") -> str:
    """A `/.flatpak-info` as `flatpak run` writes it for an app whose metadata (or `flatpak run --env=...`) sets many
    environment variables: `[Environment]` after the permissions makes it `size` bytes."""
    text = app_info(context=context) + "\n[System Bus Policy]\n\n[Environment]\n"
    line = 0
    while len(text) < size:
        text += f"VAR{line}={'x' * 80}\n"
        line += 1
    return text[:size - 1] + "\n"


def test_an_app_with_a_marker_larger_than_the_agent_reads_is_still_that_app_and_confined(sandbox_agent, auth_server):
    """Issue 53, hole 1: a 70,990-byte `/.flatpak-info` (the size a real `flatpak build-finish --env` and `flatpak
    run` produced) used to be refused, and its app served as a program of the desktop: `token` granted `open`,
    `logout` revoked the sign-in. The agent reads the groups it needs from the first 64 KiB: it is that app,
    confined, asked about by an account without a policy, and refused everything but tokens."""
    agent = sandbox_agent
    info = oversized_info()
    assert len(info.encode()) == 70_990
    for verb in (["logout", "work"], ["reload"], ["pending"], ["audit"], ["forward", "--stop", "h"]):
        refused = run_sandboxed(agent, *verb, info=info)
        assert refused.returncode == 9, (verb, refused.stderr)
    assert agent.account_status("work")["signed_in"] is True, "the refused logout changed nothing"
    waiting = sandboxed(agent, "token", "work", info=info)
    try:
        read_until(waiting.stderr, "in a terminal", 30)
        [request] = json.loads(agent.authctl("pending", "--json").stdout)["requests"]
        assert request["client"] == f"flatpak:{APP}" and request["caller"]["kind"] == "flatpak", request
        assert "not_contained" not in request["caller"], "[Environment] was reached: every permission was read"
    finally:
        waiting.kill()
        waiting.wait(timeout=10)
    set_allowed_clients(agent, auth_server, [f"flatpak:{APP}"])
    served = run_sandboxed(agent, "token", "work", info=info)
    assert served.returncode == 0, served.stderr
    assert audit(agent)[-1]["caller"]["flatpak_app"] == APP


@pytest.mark.parametrize("marker", ["no-name", "cut-name"])
def test_a_marker_the_agent_cannot_read_makes_the_caller_confined_and_unidentified(sandbox_agent, marker):
    """Issue 53, hole 1: every way of failing to read a sandbox's marker fails closed: a marker that names no app (or
    whose name lies past what the agent reads) is an unidentified sandbox, refused even by an account without a
    policy, and refused everything but tokens; never a program of the desktop."""
    agent = sandbox_agent
    info = ("[Application]\nruntime=runtime/org.example.Platform/x86_64/1\n" if marker == "no-name"
            else "[Application]\n" + "# " + "x" * 70_000 + "\nname=org.example.App\n")
    refused = run_sandboxed(agent, "token", "work", info=info)
    assert refused.returncode == 7 and refused.stdout == "", refused.stderr
    entry = audit(agent)[-1]
    assert (entry["outcome"], entry["reason"], entry["caller"]["kind"]) == ("denied", "unidentified", "unidentified"), entry
    assert "application id" in entry["caller"]["unidentified"], entry
    logout = run_sandboxed(agent, "logout", "work", info=info)
    assert logout.returncode == 9, logout.stderr
    assert agent.account_status("work")["signed_in"] is True


def test_a_writable_place_host_programs_run_from_is_shown_as_a_hole_however_it_is_spelt(sandbox_agent):
    """Issue 53, hole 9: a writable home by its absolute path, `~`, or `xdg-config` (autostart, user units, shell
    start-up) makes an app not contained, like `home`; a writable `~/Documents` does not."""
    agent = sandbox_agent
    for spelling in (agent.env["HOME"], "~", "xdg-config/autostart:create"):
        waiting = sandboxed(agent, "token", "work", info=app_info(context=f"filesystems=xdg-run/auth-agent:ro;{spelling};"))
        try:
            read_until(waiting.stderr, "in a terminal", 30)
            [request] = json.loads(agent.authctl("pending", "--json").stdout)["requests"]
            assert request["caller"].get("not_contained") == [f"filesystem={spelling}"], (spelling, request)
        finally:
            waiting.kill()
            waiting.wait(timeout=10)
        wait_for(lambda: json.loads(agent.authctl("pending", "--json").stdout)["requests"] == [], 30, "the question withdrawn")
    waiting = sandboxed(agent, "token", "work", info=app_info(context="filesystems=xdg-run/auth-agent:ro;~/Documents;"))
    try:
        read_until(waiting.stderr, "in a terminal", 30)
        [request] = json.loads(agent.authctl("pending", "--json").stdout)["requests"]
        assert "not_contained" not in request["caller"], request
    finally:
        waiting.kill()
        waiting.wait(timeout=10)


def test_a_sandboxed_app_that_goes_away_while_asked_withdraws_the_question(sandbox_agent):
    """The question an account without a policy asks about a sandboxed app waits for a person: when the app goes
    away (its sandbox killed), the question is withdrawn at once, not left until consent_timeout (60 s here)."""
    agent = sandbox_agent
    waiting = sandboxed(agent, "token", "work")
    try:
        read_until(waiting.stderr, "in a terminal", 30)
        [pending] = json.loads(agent.authctl("pending", "--json").stdout)["requests"]
        assert pending["client"] == f"flatpak:{APP}", pending
    finally:
        waiting.kill()  # bwrap; --die-with-parent takes the sandbox with it
        waiting.wait(timeout=10)
    wait_for(lambda: json.loads(agent.authctl("pending", "--json").stdout)["requests"] == [], 30,
             "the question of a sandboxed app that went away to be withdrawn")
    assert [(e["outcome"], e["reason"], e["caller"].get("flatpak_app")) for e in audit(agent)] == [
        ("withdrawn", "cancelled", APP)]


def test_an_app_with_a_hole_in_its_sandbox_is_shown_not_contained(sandbox_agent):
    """An app whose sandbox has the session bus (`--socket=session-bus`) and may talk to org.freedesktop.Flatpak (which
    runs commands on the host) can do what any program of yours can: the question about it (`authctl pending`) and
    the audit say "not contained" and name the holes; its read-only home and the agent's socket directory are not
    holes. The same app without them is not so marked."""
    agent = sandbox_agent
    holes = app_info(context="sockets=wayland;session-bus;\nfilesystems=xdg-run/auth-agent:ro;home:ro;",
                     session_bus="org.freedesktop.Flatpak=talk\ndev.authagent.Agent=talk")
    waiting = sandboxed(agent, "token", "work", info=holes)
    try:
        read_until(waiting.stderr, "in a terminal", 30)
        pending = agent.authctl("pending")
        assert "flatpak:org.example.App (instance 1234567890) (not contained: socket=session-bus, " \
               "talk-name=org.freedesktop.Flatpak)" in pending.stdout, pending.stdout
        [request] = json.loads(agent.authctl("pending", "--json").stdout)["requests"]
        assert request["caller"]["not_contained"] == ["socket=session-bus", "talk-name=org.freedesktop.Flatpak"], request
        rc, output = run_in_terminal(agent, "deny", str(request["id"]))
        assert rc == 0, output
        waiting.communicate(timeout=60)
    finally:
        if waiting.poll() is None:
            waiting.kill()
            waiting.wait(timeout=10)
    assert waiting.returncode == 7
    entry = audit(agent)[-1]
    assert (entry["outcome"], entry["reason"]) == ("denied", "denied_by_user"), entry
    assert entry["caller"]["not_contained"] == ["socket=session-bus", "talk-name=org.freedesktop.Flatpak"], entry
    assert entry["caller"]["flatpak_instance"] == INSTANCE, entry
    assert "(not contained: socket=session-bus, talk-name=org.freedesktop.Flatpak)" in agent.authctl("audit").stdout

    rc, output = run_in_terminal(agent, "forget", "--account", "work", "--client", f"flatpak:{APP}")
    assert rc == 0, output
    contained = sandboxed(agent, "token", "work", info=app_info(context="filesystems=xdg-run/auth-agent:ro;"))
    try:
        read_until(contained.stderr, "in a terminal", 30)
        [request] = json.loads(agent.authctl("pending", "--json").stdout)["requests"]
        assert "not_contained" not in request["caller"] and request["caller"]["flatpak_app"] == APP, request
    finally:
        contained.kill()
        contained.wait(timeout=10)


def test_an_app_in_other_namespaces_than_its_instance_record_is_unidentified(sandbox_agent, auth_server):
    """`flatpak run` keeps bwrap's `--info-fd` record as `$XDG_RUNTIME_DIR/.flatpak/INSTANCE/bwrapinfo.json`. A run
    whose record bwrap wrote is in the namespaces it names: served by its `flatpak:` entry, its instance audited. A
    later sandbox naming the same instance (a stale record, or a claimed instance) is in other namespaces:
    refused as `unidentified` with the reason, though its entry names the app. A record that is not a regular file
    (a FIFO) refuses at once, without waiting on it."""
    agent = sandbox_agent
    set_allowed_clients(agent, auth_server, [f"flatpak:{APP}"])
    instance_dir = agent.runtime / ".flatpak" / INSTANCE
    instance_dir.mkdir(parents=True)
    record = instance_dir / "bwrapinfo.json"
    served = run_sandboxed(agent, "token", "work", bwrapinfo=record)
    assert served.returncode == 0, served.stderr
    recorded = json.loads(record.read_text())
    assert {"pid-namespace", "mnt-namespace"} <= recorded.keys(), recorded  # the premise: what is compared
    entry = audit(agent)[-1]
    assert (entry["outcome"], entry["reason"]) == ("granted", "listed"), entry
    assert entry["caller"]["flatpak_instance"] == INSTANCE and entry["caller"]["kind"] == "flatpak", entry

    refused = run_sandboxed(agent, "token", "work", bwrapinfo=False)  # the same instance id; the record is the first run's
    assert refused.stdout == "", "served in namespaces its instance record does not name"  # (never print what it got)
    assert refused.returncode == 7, refused.stderr
    assert "an unidentified sandbox (its pid namespace" in refused.stderr, refused.stderr
    assert f"the app it names ({APP}) is not believed" in refused.stderr, refused.stderr
    entry = audit(agent)[-1]
    assert (entry["outcome"], entry["reason"]) == ("denied", "unidentified"), entry
    assert entry["caller"]["unidentified"].startswith("its pid namespace "), entry
    assert entry["caller"]["kind"] == "unidentified" and entry["caller"]["flatpak_app"] == APP, entry
    assert f"an unidentified sandbox (its pid namespace" in agent.authctl("audit").stdout

    record.unlink()
    os.mkfifo(record)
    fifo = run_sandboxed(agent, "token", "work", bwrapinfo=False)
    assert fifo.returncode == 7, fifo.stderr
    entry = audit(agent)[-1]
    assert (entry["outcome"], entry["reason"]) == ("denied", "unidentified"), entry
    assert "not a regular file" in entry["caller"]["unidentified"], entry

    # What a container that wrote a /.flatpak-info of its own shows: an instance without a record, or no instance
    # at all. Neither is believed (before: both were the app, served by its entry).
    record.unlink()
    for info, why in ((FLATPAK_INFO, "has no bwrapinfo.json"), (FLATPAK_INFO.split("[Instance]")[0], "names no instance")):
        claimed = run_sandboxed(agent, "token", "work", info=info, bwrapinfo=False)
        assert claimed.stdout == "" and claimed.returncode == 7, claimed.stderr
        entry = audit(agent)[-1]
        assert (entry["outcome"], entry["reason"]) == ("denied", "unidentified"), entry
        assert why in entry["caller"]["unidentified"] and entry["caller"]["flatpak_app"] == APP, entry


def test_git_in_a_flatpak_ide_gets_its_credential_through_the_documented_helper(sandbox_agent, auth_server):
    """docs/INTEGRATIONS.md, "Flatpak apps": git in the app's sandbox runs the helper line as printed, with the host's
    authctl where `--filesystem=host-os:ro` shows it (`/run/host/usr/bin/authctl`), and gets its password from the
    account that lists the app; an account that does not list it refuses, and git gets nothing."""
    agent = sandbox_agent
    helper = recipe_block(REPO / "docs" / "INTEGRATIONS.md", "## Flatpak apps", "**git in a Flatpak IDE**")
    [line] = [l for l in helper.splitlines() if "credential." in l]
    helper_value = re.search(r"'(!/run/host/usr/bin/authctl [^']+)'", line).group(1).replace("gitlab", "work")
    git = ["git", "-c", f"credential.helper={helper_value}", "credential", "fill"]
    set_allowed_clients(agent, auth_server, [f"flatpak:{APP}"])
    fill = sandboxed(agent, command=git)
    out, err = fill.communicate("protocol=https\nhost=gitlab.com\n\n", timeout=60)
    assert fill.returncode == 0, err
    fields = dict(l.split("=", 1) for l in out.splitlines() if "=" in l)
    agent.remember(fields.get("password", ""))
    assert fields.get("username") == "oauth2" and fields.get("password"), "git got no credential"  # (never print it)
    entry = audit(agent)[-1]
    assert (entry["outcome"], entry["reason"], entry["caller"]["flatpak_app"]) == ("granted", "listed", APP), entry

    set_allowed_clients(agent, auth_server, ["/usr/bin/git"])
    refused = sandboxed(agent, command=git)
    out, err = refused.communicate("protocol=https\nhost=gitlab.com\n\n", timeout=60)
    assert "password=" not in out, "a list naming the path git shows served the app"
    assert refused.returncode != 0 and f"flatpak:{APP}" in err, err


def test_a_sandboxed_app_gets_tokens_and_nothing_else(sandbox_agent, auth_server):
    """Issue 46 §2: an app may ask for tokens (and see the accounts it was given); signing in, answering consent
    questions, forgetting decisions and reading the audit are for programs on the host."""
    agent = sandbox_agent
    agent.write_config(render_config({"work": default_account(auth_server.issuer, allowed_clients=[f"flatpak:{APP}"]),
                                      "other": default_account(auth_server.issuer)}, {"consent_timeout": 60}))
    assert agent.authctl("reload", timeout=20).returncode == 0
    for verb in (["login", "work"], ["logout", "work"], ["approve", "1"], ["forget", "--account", "work"], ["audit"],
                 ["reload"]):
        refused = run_sandboxed(agent, *verb)
        assert refused.returncode == 9, (verb, refused.returncode, refused.stderr)
        assert "may only get tokens of the accounts it was given" in refused.stderr, (verb, refused.stderr)
    shown = run_sandboxed(agent, "status", "--json")
    assert shown.returncode == 0, shown.stderr
    status = json.loads(shown.stdout)
    assert [a["name"] for a in status["accounts"]] == ["work"], "the app sees only the account it was given"
    assert "forwards" not in status
    assert agent.account_status("work")["signed_in"] is True, "the refused logout changed nothing"


def test_a_sandboxed_apps_forced_refreshes_are_bounded(sandbox_agent, auth_server, keyring):
    """Issue 53: an app given an account sent 100 `token --refresh` and caused 100 token requests, each rotating the
    user's refresh token. A confined caller's forced refresh is honoured once per account per minute (for all of them
    together); beyond that it gets the cached token, without an error. A program of the desktop is not bounded."""
    agent = sandbox_agent
    set_allowed_clients(agent, auth_server, [f"flatpak:{APP}"])
    before = keyring.secret_tool_lookup("work", auth_server.issuer)
    posts = auth_server.token_posts()
    tokens = set()
    for _ in range(10):
        served = run_sandboxed(agent, "token", "work", "--refresh")
        assert served.returncode == 0, served.stderr
        tokens.add(served.stdout.strip())
    assert auth_server.token_posts() - posts == 1, "one forced refresh honoured, nine served from the cache"
    assert len(tokens) == 1, "all ten got the token that refresh minted"
    token = tokens.pop()
    assert auth_server.introspect(token)["active"] is True
    rotated = keyring.secret_tool_lookup("work", auth_server.issuer)
    agent.remember(rotated)
    assert rotated and rotated != before, "the refresh token was rotated once"
    granted = [e for e in audit(agent) if e["caller"].get("flatpak_app") == APP and e["outcome"] == "granted"]
    assert len(granted) == 10, "every request was served and audited"

    # A program of the desktop (here under an account without a policy): each forced refresh is honoured, as before.
    set_allowed_clients(agent, auth_server, None)
    posts = auth_server.token_posts()
    first = agent.token("work", "--refresh")
    second = agent.token("work", "--refresh")
    assert len({token, first, second}) == 3
    assert auth_server.token_posts() - posts == 2
    agent.remember(keyring.secret_tool_lookup("work", auth_server.issuer))


def test_two_apps_get_decisions_of_their_own(sandbox_agent):
    """Allowing one app allows that app: another app (another id) is asked about by itself, and denying it leaves
    the first served."""
    agent = sandbox_agent
    other = "org.example.Other"
    other_info = FLATPAK_INFO.replace(f"name={APP}", f"name={other}").replace(INSTANCE, "987654321")

    def answer_next(info: str, verb: str):
        waiting = sandboxed(agent, "token", "work", info=info)
        try:
            read_until(waiting.stderr, "in a terminal", 30)
            [pending] = json.loads(agent.authctl("pending", "--json").stdout)["requests"]
            rc, output = run_in_terminal(agent, verb, str(pending["id"]))
            assert rc == 0, output
            out, _ = waiting.communicate(timeout=30)
            if waiting.returncode == 0:
                agent.remember(out.strip())
            return pending["client"], waiting.returncode
        finally:
            if waiting.poll() is None:
                waiting.kill()
                waiting.wait()

    assert answer_next(FLATPAK_INFO, "approve") == (f"flatpak:{APP}", 0)
    assert answer_next(other_info, "deny") == (f"flatpak:{other}", 7), "the other app is asked about by itself"
    assert run_sandboxed(agent, "token", "work").returncode == 0, "the first app is still served"
    refused = run_sandboxed(agent, "token", "work", info=other_info)
    assert refused.returncode == 7 and "you denied it" in refused.stderr, refused.stderr
    decisions = {(e["caller"].get("flatpak_app"), e["reason"]) for e in audit(agent)}
    assert {(APP, "approved"), (other, "denied_by_user")} <= decisions, decisions


def test_a_caller_whose_root_the_agent_cannot_read_is_unidentified_even_by_an_open_account(make_agent, tmp_path):
    """Issue 46 §1: a caller whose root the agent may not read (here: one holding capabilities the agent lacks, so
    ptrace rules refuse /proc/PID/root; elsewhere a non-dumpable process or a setuid bwrap's sandbox) may be in a
    sandbox: it is never served as a program of yours, and, naming no app, is refused as unidentified. The same
    authctl without those capabilities is served."""
    no_caps = ["setpriv", "--bounding-set=-all", "--inh-caps=-all"]
    agent = make_agent(start=False)
    wrapped = tmp_path / "bin"
    wrapped.mkdir()
    (wrapped / "auth-agent").write_text(f"#!/bin/sh\nexec {' '.join(no_caps)} {agent.bins / 'auth-agent'} \"$@\"\n")
    (wrapped / "auth-agent").chmod(0o755)
    plain_authctl = agent.bins / "authctl"
    (wrapped / "authctl").write_text(f"#!/bin/sh\nexec {' '.join(no_caps)} {plain_authctl} \"$@\"\n")
    (wrapped / "authctl").chmod(0o755)
    agent.bins = wrapped
    agent.start()
    agent.login("work")
    assert agent.token("work"), "a caller without capabilities, whose root the agent reads, is served"
    # root's authctl, with every capability: the capability-less agent cannot read its root.
    refused = subprocess.run([str(plain_authctl), "token", "work"], env=agent.env, capture_output=True, text=True,
                             timeout=60, stdin=subprocess.DEVNULL)
    assert refused.returncode == 7 and refused.stdout == "", refused.stderr
    assert "cannot read who it is" in refused.stderr, refused.stderr
    entry = audit(agent)[-1]
    assert (entry["outcome"], entry["reason"]) == ("denied", "unidentified"), entry
    assert entry["caller"]["kind"] == "unidentified" and "root directory cannot be read" in entry["caller"]["unidentified"], entry


def test_an_app_without_the_socket_permission_is_told_which_one_it_lacks(sandbox_agent):
    """Issue 54, item 12: an app whose sandbox does not show the agent's socket directory was told the agent was not
    running and to run `systemctl --user start auth-agent.socket` (exit 3) while the agent ran. Inside a sandbox
    authctl says which finish-arg is missing, for the socket and for D-Bus."""
    agent = sandbox_agent
    refused = run_sandboxed(agent, "token", "work", socket_dir=False)
    assert refused.returncode == 3 and refused.stdout == "", refused.stderr
    said = refused.stderr
    assert f"inside the Flatpak sandbox of {APP}" in said, said
    assert "lacks the permission `--filesystem=xdg-run/auth-agent:ro`" in said, said
    assert f"flatpak override --user --filesystem=xdg-run/auth-agent:ro {APP}" in said, said
    assert "--talk-name=dev.authagent.Agent" in said, said
    assert "not running" not in said and "systemctl" not in said, said
    assert agent.token("work"), "the premise: the agent runs, and serves the host"

    doctor = run_sandboxed(agent, "doctor", socket_dir=False)
    assert doctor.returncode == 1, doctor.stdout + doctor.stderr
    agent_line = next(line for line in doctor.stdout.splitlines() if " agent " in f" {line} ")
    assert "lacks the permission `--filesystem=xdg-run/auth-agent:ro`" in agent_line, doctor.stdout
    assert "systemctl" not in doctor.stdout, doctor.stdout


def test_status_in_an_app_says_it_is_an_app_and_hides_the_desktops(sandbox_agent, auth_server):
    """Issue 54, item 6: a confined view says what it is and leaves out the desktop's socket, keyring and pid."""
    agent = sandbox_agent
    set_allowed_clients(agent, auth_server, [f"flatpak:{APP}"])
    shown = run_sandboxed(agent, "status")
    assert shown.returncode == 0, shown.stderr
    assert f"seen as: an app inside its Flatpak sandbox, named flatpak:{APP} in allowed_clients" in shown.stdout, shown.stdout
    assert str(agent.socket_path) not in shown.stdout and "keyring:" not in shown.stdout, shown.stdout
    assert "account:       work" in shown.stdout, shown.stdout
    shown = json.loads(run_sandboxed(agent, "status", "--json").stdout)
    assert (shown["view"], shown["named_by"]) == ("flatpak", f"flatpak:{APP}"), shown
    assert not {"pid", "socket", "keyring", "store"} & shown["agent"].keys(), shown["agent"]
