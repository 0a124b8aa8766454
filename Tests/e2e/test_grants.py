"""Grants (`authctl grant`, issue 55): a socket of its own per workload, mounted into a container, that serves the
grant's accounts and nothing else, ends at once when revoked, at its time, or when the process it is tied to exits,
and outlives agent restarts and crashes while it lasts.

The containers are bwrap's with their own user, pid, mount, IPC and UTS namespaces, a root of the host's /usr and
/etc only, and nothing of the desktop's runtime directory but the grant's directory, mounted where the recipe in
docs/INTEGRATIONS.md mounts it (/run/auth-agent); and real podman, running that recipe as printed with the host's
root under an overlay for its image (scripts/setup configures podman for this machine class). Real agent, keyring
and authorization server."""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time

import pytest

from conftest import connection_closed, default_account, read_until, render_config, wait_for
from test_sandbox import BWRAP, authctl_path, host_tree, library_dirs

pytestmark = pytest.mark.release

MOUNT = "/run/auth-agent"
PODMAN = shutil.which("podman") or "/usr/bin/podman"


def container(agent, grant_dir: str, command: list[str], stdin=subprocess.DEVNULL) -> subprocess.Popen:
    """`command` in a bwrap container that sees the grant's directory at /run/auth-agent and nothing else of the
    desktop's runtime directory; AUTH_AGENT_SOCKET points at the socket, as the recipe says."""
    authctl = authctl_path(agent)
    argv = [BWRAP, "--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--die-with-parent",
            *host_tree(), "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--tmpfs", "/run", "--tmpfs", "/opt"]
    for directory in library_dirs(authctl):
        argv += ["--ro-bind", directory, directory]
    argv += ["--ro-bind", authctl, "/opt/bin/authctl", "--bind", grant_dir, MOUNT,
             "--setenv", "AUTH_AGENT_SOCKET", f"{MOUNT}/socket", "--unsetenv", "XDG_RUNTIME_DIR"]
    return subprocess.Popen([*argv, *command], env=agent.env, stdin=stdin, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def in_container(agent, grant_dir: str, *args) -> subprocess.CompletedProcess:
    proc = container(agent, grant_dir, ["/opt/bin/authctl", *args])
    out, err = proc.communicate(timeout=60)
    if proc.returncode == 0 and args and args[0] == "token":
        agent.remember(out.strip())
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def make_grant(agent, name: str, *args) -> dict:
    result = agent.authctl("grant", name, *args, "--json", timeout=20)
    assert result.returncode == 0, f"authctl grant failed ({result.returncode}): {result.stderr}"
    return json.loads(result.stdout)["grant"]


def audit(agent) -> list[dict]:
    result = agent.authctl("audit", "--json", timeout=20)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["entries"]


@pytest.fixture
def two_accounts(make_agent, keyring, auth_server):
    agent = make_agent(accounts={"work": default_account(auth_server.issuer),
                                 "personal": default_account(auth_server.issuer)})
    agent.login("work")
    agent.login("personal")
    return agent


def test_a_grant_serves_its_account_in_a_container_and_nothing_else(two_accounts):
    agent = two_accounts
    grant = make_grant(agent, "ci", "--account", "work", "--for", "1h")
    directory = os.path.dirname(grant["socket"])
    assert grant["accounts"] == ["work"] and grant["expires"] is not None
    assert os.stat(directory).st_mode & 0o777 == 0o700 and os.stat(grant["socket"]).st_mode & 0o777 == 0o600

    served = in_container(agent, directory, "token", "work")
    assert served.returncode == 0, served.stderr
    assert served.stdout.strip() == agent.token("work")

    other = in_container(agent, directory, "token", "personal")
    assert other.returncode == 7, other.stderr
    assert "grant 'ci' does not include account 'personal'" in other.stderr

    # Nothing but tokens of its accounts: no sign-in, no other account's status, no grants of its own.
    for verb in (["login", "work"], ["logout", "work"], ["reload"], ["pending"],
                 ["grant", "more", "--account", "personal"], ["grant", "--revoke", "ci"]):
        refused = in_container(agent, directory, *verb)
        assert refused.returncode != 0, f"{verb} was served through the grant"
        assert "only get tokens of the accounts it was given" in refused.stderr or "desktop" in refused.stderr, refused.stderr
    status = in_container(agent, directory, "status", "--json")
    assert status.returncode == 0, status.stderr
    seen = json.loads(status.stdout)
    assert [a["name"] for a in seen["accounts"]] == ["work"]
    assert seen["view"] == "grant" and seen["named_by"] == "ci"
    assert "grants" not in seen and "forwards" not in seen and seen["agent"].get("socket") is None

    records = [r for r in audit(agent) if r["caller"].get("grant") == "ci"]
    granted = [r for r in records if r["outcome"] == "granted"]
    denied = [r for r in records if r["outcome"] == "denied"]
    assert granted and all(r["account"] == "work" and r["reason"] == "granted" for r in granted)
    assert denied and denied[0]["account"] == "personal" and denied[0]["reason"] == "not_granted"
    caller = granted[0]["caller"]
    assert caller["kind"] == "grant" and caller["via"] == "grant:ci"
    assert caller["pid_namespace"].startswith("pid:[")  # a pid namespace of its own, as the container has
    assert caller["exe"] == "/opt/bin/authctl"  # the path in its own root: shown, never judged

    listed = agent.status_json()["grants"]
    assert [g["name"] for g in listed] == ["ci"] and listed[0]["uses"] == 1 and listed[0]["last_use"]
    human = agent.authctl("grant", "--list")
    assert human.returncode == 0 and "ci" in human.stdout and "work" in human.stdout


def test_revoke_closes_the_socket_and_its_connections_at_once(two_accounts):
    agent = two_accounts
    grant = make_grant(agent, "build", "--account", "work")
    path = grant["socket"]
    # A workload holding a connection open: through a container's process that waits on stdin between requests.
    script = ("import socket,sys,json\n"
              "s=socket.socket(socket.AF_UNIX);s.connect('/run/auth-agent/socket')\n"
              "f=s.makefile('rwb')\n"
              "for line in sys.stdin:\n"
              "    try:\n"
              "        f.write(b'{\"v\":1,\"op\":\"token\",\"account\":\"work\"}\\n');f.flush()\n"
              "        reply=f.readline()\n"
              "    except OSError:\n"
              "        reply=b''\n"
              "    print('closed' if not reply else ('ok' if b'access_token' in reply else 'error'),flush=True)\n")
    proc = container(agent, os.path.dirname(path), ["/usr/bin/python3", "-c", script], stdin=subprocess.PIPE)
    try:
        proc.stdin.write("go\n")
        proc.stdin.flush()
        assert read_until(proc.stdout, "ok", 30)
        revoked = agent.authctl("grant", "--revoke", "build")
        assert revoked.returncode == 0, revoked.stderr
        assert not os.path.exists(path)
        proc.stdin.write("again\n")
        proc.stdin.flush()
        assert "closed" in read_until(proc.stdout, "closed", 30)
    finally:
        proc.kill()
        proc.communicate(timeout=10)
    with socket.socket(socket.AF_UNIX) as s:
        with pytest.raises(OSError):
            s.connect(path)
    assert "grants" not in agent.status_json()
    again = agent.authctl("grant", "--revoke", "build")
    assert again.returncode == 9 and "no grant 'build'" in again.stderr


def test_a_grant_ends_at_its_time_and_with_the_process_it_is_tied_to(two_accounts):
    agent = two_accounts
    timed = make_grant(agent, "short", "--account", "work", "--for", "2s")
    tied_to = subprocess.Popen(["sleep", "600"])
    try:
        tied = make_grant(agent, "tied", "--account", "work", "--while-pid", str(tied_to.pid))
        assert tied["while_pid"] == tied_to.pid
        with socket.socket(socket.AF_UNIX) as held:
            held.connect(tied["socket"])
            tied_to.kill()
            tied_to.wait(timeout=10)
            wait_for(lambda: not os.path.exists(tied["socket"]), 10, "the tied grant's socket to go")
            assert connection_closed(held)
    finally:
        tied_to.kill()
    wait_for(lambda: not os.path.exists(timed["socket"]), 15, "the timed grant's socket to go at its time")
    assert "grants" not in agent.status_json()
    assert "its time is up" in agent.log() and "which it was tied to, exited" in agent.log()


def test_a_grant_outlives_an_agent_restart_and_a_crash(two_accounts):
    agent = two_accounts
    grant = make_grant(agent, "long", "--account", "work", "--for", "1h")
    directory = os.path.dirname(grant["socket"])
    # The container is up before the agent goes: its mount holds the directory, not the socket.
    proc = container(agent, directory, ["/bin/sh", "-c", "while read x; do /opt/bin/authctl token work; echo rc=$?; done"],
                     stdin=subprocess.PIPE)
    try:
        for step in ("restart", "crash"):
            if step == "restart":
                agent.restart()
            else:
                agent.kill9()
                agent.start()
            proc.stdin.write("go\n")
            proc.stdin.flush()
            out = read_until(proc.stdout, "rc=", 30)
            assert out.strip().endswith("rc=0"), f"after the agent's {step}: {out!r}"
            token = out.strip().splitlines()[-2]
            agent.remember(token)
            assert token == agent.token("work")
    finally:
        proc.kill()
        proc.communicate(timeout=10)
    assert [g["name"] for g in agent.status_json()["grants"]] == ["long"]
    assert agent.authctl("grant", "--revoke", "long").returncode == 0
    agent.restart()
    assert not os.path.exists(grant["socket"]) and "grants" not in agent.status_json()


def test_a_desktop_hook_asks_as_the_grant(two_accounts):
    """`authctl token ACCOUNT --grant NAME`: a hook the sandbox's tool runs on the desktop gets the grant's token,
    audited as the grant; another account is refused."""
    agent = two_accounts
    make_grant(agent, "agentic", "--account", "work")
    served = agent.authctl("token", "work", "--grant", "agentic")
    assert served.returncode == 0, served.stderr
    refused = agent.authctl("token", "personal", "--grant", "agentic")
    assert refused.returncode == 7 and "does not include account 'personal'" in refused.stderr
    records = [r for r in audit(agent) if r["caller"].get("via") == "grant:agentic"]
    assert [r["outcome"] for r in records] == ["granted", "denied"]
    missing = agent.authctl("token", "work", "--grant", "nonesuch")
    assert missing.returncode != 0 and "nonesuch" in missing.stderr


def test_making_a_grant_is_checked(two_accounts, auth_server):
    agent = two_accounts
    unknown = agent.authctl("grant", "x", "--account", "nope")
    assert unknown.returncode == 8 and "nope" in unknown.stderr
    bad = agent.authctl("grant", "../x", "--account", "work")
    assert bad.returncode == 9 and "no grant name" in bad.stderr
    assert agent.authctl("grant", "x").returncode == 2  # no --account: a usage error
    make_grant(agent, "dup", "--account", "work")
    dup = agent.authctl("grant", "dup", "--account", "work")
    assert dup.returncode == 9 and "exists" in dup.stderr
    # An account with an access policy is granted only by a person at a terminal, not by a background program.
    agent.write_config(render_config({"work": default_account(auth_server.issuer, allowed_clients=[]),
                                      "personal": default_account(auth_server.issuer)}))
    assert agent.authctl("reload").returncode == 0
    background = agent.authctl("grant", "guarded", "--account", "work")
    assert background.returncode == 9 and "terminal" in background.stderr


def podman(agent, grant_dir: str, command: list[str], cidfile, stdin=subprocess.DEVNULL) -> subprocess.Popen:
    """The podman recipe of docs/INTEGRATIONS.md as printed, with `--rootfs /:O` where it has IMAGE (the host's root
    under a throwaway overlay: no image to pull, and this machine reaches no registry) and `--cidfile` to learn the
    container's id. Podman 4.3's `--rootfs` is a flag whose root is the first argument, so it goes last."""
    assert os.access(PODMAN, os.X_OK), "podman is not installed: run scripts/setup (apt-get install podman runc)"
    argv = [PODMAN, "run", "--rm", "--network", "none", "-v", f"{grant_dir}:{MOUNT}",
            "-e", f"AUTH_AGENT_SOCKET={MOUNT}/socket", "-v", f"{authctl_path(agent)}:/usr/local/bin/authctl:ro",
            "--cidfile", str(cidfile), *(["-i"] if stdin == subprocess.PIPE else []), "--rootfs", "/:O", *command]
    return subprocess.Popen(argv, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def answer(proc, line: str) -> tuple[str, int]:
    """Sends `line` to a container's `while read` loop; its output up to and including `rc=N`, and N."""
    proc.stdin.write(line + "\n")
    proc.stdin.flush()
    text = read_until(proc.stdout, "rc=", 30)
    while not re.search(r"rc=\d+\n", text):
        text += read_until(proc.stdout, "\n", 30)
    return text, int(re.search(r"rc=(\d+)\n", text).group(1))


def test_the_podman_recipe_serves_the_grant_audited_with_the_container_and_revoked_mid_use(two_accounts, tmp_path):
    agent = two_accounts
    grant = make_grant(agent, "pod", "--account", "work", "--for", "1h")
    directory = os.path.dirname(grant["socket"])

    # The recipe's own command, once: the token is the desktop's.
    run = podman(agent, directory, ["authctl", "token", "work"], tmp_path / "first.cid")
    out, err = run.communicate(timeout=60)
    assert run.returncode == 0, f"podman run of the recipe failed ({run.returncode}): {err.strip()}"
    token = out.strip()
    agent.remember(token)
    assert token == agent.token("work")
    first = (tmp_path / "first.cid").read_text().strip()

    # A container that stays up and asks when told: another account, refused; its own; revoked; its own again.
    loop = podman(agent, directory, ["sh", "-c", 'while read a; do authctl token "$a"; echo rc=$?; done'],
                  tmp_path / "loop.cid", stdin=subprocess.PIPE)
    try:
        _, rc = answer(loop, "personal")
        assert rc == 7
        second = (tmp_path / "loop.cid").read_text().strip()
        running = subprocess.run([PODMAN, "ps", "--no-trunc", "--format", "{{.ID}}"], capture_output=True, text=True,
                                 timeout=30)
        assert second in running.stdout.split(), f"podman ps: {running.stdout!r} {running.stderr!r}"
        text, rc = answer(loop, "work")
        assert rc == 0 and text.splitlines()[0] == token
        revoked = agent.authctl("grant", "--revoke", "pod")
        assert revoked.returncode == 0, revoked.stderr
        _, rc = answer(loop, "work")
        assert rc != 0
        loop.stdin.close()
        loop.wait(timeout=30)
        err = loop.stderr.read()
    finally:
        loop.kill()
        loop.wait(timeout=30)
    assert "grant 'pod' does not include account 'personal'" in err, err
    assert loop.returncode == 0, err

    records = [r for r in audit(agent) if r["caller"].get("via") == "grant:pod"]
    assert [(r["account"], r["outcome"]) for r in records] == \
        [("work", "granted"), ("personal", "denied"), ("work", "granted")], records
    # The container's id, as podman has it, from the caller's cgroup (`/libpod_parent/libpod-ID` with the cgroupfs
    # manager): each request names its own container.
    assert [r["caller"].get("container") for r in records] == \
        [f"podman {first[:12]}", f"podman {second[:12]}", f"podman {second[:12]}"], records
    for record in records:
        caller = record["caller"]
        assert caller["kind"] == "grant" and caller["grant"] == "pod"
        assert caller["pid_namespace"].startswith("pid:[")
        assert caller["exe"] == "/usr/local/bin/authctl"
