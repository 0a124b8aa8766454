"""Who asks (issue 9): the agent identifies each caller from the kernel (SO_PEERCRED/SO_PEERPIDFD, /proc/PID/exe,
cgroup), applies the account's allowed_clients and confirm = "first-use", and records every grant and refusal in
its audit trail. Real processes are the callers: the built authctl copied to an allowed and a not-allowed path, a
forked client whose connection outlives it, gdbus on the session bus; consent is answered by `authctl approve` run
in a real pseudo-terminal, by a timeout, and by the Allow button of a (fake) notification server. The agent, the
keyring and the Django OAuth Toolkit server are the real ones.

No systemd runs as PID 1 here, so callers cannot be started in a transient unit or a named scope; instead a test
creates the unit's cgroup itself (as systemd would) where the cgroup file system is writable and moves the caller
into it before it connects. The parsing of other layouts is covered by Tests/AgentServerTests/ProcFSTests.swift
against recorded /proc/PID/cgroup contents."""
import fcntl
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

from conftest import REPO, SYSTEM_PATH, default_account, read_until, stop_process, wait_for

# Every test here runs on both identity paths: with SO_PEERPIDFD, and as on kernels without it.
# Every test on both kernel paths (kernel_paths), and in the installed-package subset (scripts/test).
pytestmark = [pytest.mark.usefixtures("kernel_paths"), pytest.mark.release]

FAKE_NOTIFICATIONS = REPO / "Tests" / "Fixtures" / "notifications" / "fake_notifications.py"


def copy_authctl(agent, name: str):
    """The built authctl at another path: the same bytes, another identity."""
    directory = agent.base / name
    directory.mkdir(mode=0o700)
    target = directory / "authctl"
    shutil.copy2(agent.bins / "authctl", target)
    return target


def run(binary, agent, *args, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([str(binary), *args], env=agent.env, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def run_in_terminal(agent, *args, timeout: float = 30) -> tuple[int, str]:
    """authctl with a pseudo-terminal as its controlling terminal, like a person typing it."""
    master, slave = os.openpty()

    def become_session_leader_with_tty():
        os.setsid()
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    proc = subprocess.Popen([str(agent.bins / "authctl"), *args], env=agent.env, stdin=slave, stdout=slave,
                            stderr=slave, preexec_fn=become_session_leader_with_tty)
    os.close(slave)
    output = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the terminal's last user closed it
            break
        if not chunk:
            break
        output += chunk
    os.close(master)
    return proc.wait(timeout=10), output.decode(errors="replace")


def audit(agent, *args) -> list[dict]:
    result = agent.authctl("audit", "--json", *args)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["entries"]


def assert_no_token_in(agent, *texts):
    assert agent.secrets, "the test must know at least one token to scan for"
    for text in texts:
        for secret in agent.secrets:
            assert secret not in text, "a token value appears in audit output"
    agent.assert_no_secrets_logged()


@pytest.fixture
def listed_agent(make_agent, keyring, auth_server, tmp_path):
    """An agent whose account allows one copy of authctl (created before the agent reads its config)."""
    agent = make_agent(start=False)
    allowed = copy_authctl(agent, "allowed")
    other = copy_authctl(agent, "other")
    agent.write_config(agent.config_path.read_text() + f'allowed_clients = ["{allowed}", "unit:mbsync.service"]\n')
    agent.start()
    agent.login("work")
    agent.remember(keyring.secret_tool_lookup("work", auth_server.issuer))
    agent.allowed, agent.other = allowed, other
    return agent


def test_same_binary_at_an_allowed_and_a_not_allowed_path(listed_agent):
    agent = listed_agent
    granted = run(agent.allowed, agent, "token", "work")
    assert granted.returncode == 0, granted.stderr
    token = granted.stdout.strip()
    agent.remember(token)

    refused = run(agent.other, agent, "token", "work")
    assert refused.returncode == 7, refused
    assert refused.stdout == ""
    assert str(agent.other) in refused.stderr, "the message names the refused identity"
    assert "allowed_clients" in refused.stderr and "[accounts.work]" in refused.stderr, "and how to allow it"
    # The agent's own authctl relays: judged is the program that ran it (this test's interpreter), not listed.
    relayed = agent.authctl("token", "work")
    assert relayed.returncode == 7
    assert f"{os.readlink('/proc/self/exe')} via authctl" in relayed.stderr, relayed.stderr

    status = agent.account_status("work")
    assert status["access"]["open"] is False
    assert status["access"]["allowed_clients"] == [str(agent.allowed), "unit:mbsync.service"]
    text = agent.authctl("status").stdout
    assert f"only {agent.allowed}, unit:mbsync.service" in text

    entries = audit(agent, "--account", "work")
    assert [(e["outcome"], e["reason"], e["caller"]["exe"]) for e in entries] == [
        ("granted", "listed", str(agent.allowed)),
        ("denied", "not_listed", str(agent.other)),
        ("denied", "not_listed", os.readlink("/proc/self/exe")),
    ]
    assert [e["caller"].get("relayed_by") for e in entries] == [None, None, [str(agent.bins.resolve() / "authctl")]]
    for entry in entries:
        assert entry["caller"]["via"] == "socket" and entry["caller"]["pid"] > 0 and entry["account"] == "work"
    # The same records in the agent's log, as structured fields (the journal's PEER_EXE, REASON, ... under systemd).
    log = agent.log()
    assert "token refused" in log and f"peer_exe={agent.other}" in log and "reason=not_listed" in log
    assert "token granted" in log and f"peer_exe={agent.allowed}" in log
    human = agent.authctl("audit").stdout
    print(human)  # the report quotes a real run
    assert "denied (not_listed)" in human and str(agent.other) in human
    assert_no_token_in(agent, json.dumps(entries), human)


CLIENT = """
import json, socket, sys
sys.stdin.readline()  # connect only when told to
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(sys.argv[1])
s.sendall(json.dumps({"v": 1, "id": 1, "op": "token", "account": "work"}).encode() + b"\\n")
line = b""
while not line.endswith(b"\\n"):
    line += s.recv(65536)
print(line.decode().strip())
"""


# A client that fills the ring: sends COUNT token requests on one connection (answered from the cache, each one
# audited), then runs the agent's authctl RELAYED times (audited with relayed_by). Prints counts, never a token.
RING_FILLER = """
import json, os, socket, subprocess, sys
path, count, authctl, relayed = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(20)
s.connect(path)
s.sendall(b"".join(b'{"v":1,"id":%d,"op":"token","account":"work"}\\n' % n for n in range(count)))
buffer, served = b"", 0
while served < count:
    chunk = s.recv(1 << 20)
    if not chunk:
        break
    buffer += chunk
    *lines, buffer = buffer.split(b"\\n")
    served += sum(1 for line in lines if "result" in json.loads(line))
runs = [subprocess.run([authctl, "token", "work"], capture_output=True).returncode for _ in range(relayed)]
print(served, runs.count(0))
"""


def test_audit_reads_a_full_ring_of_long_records(make_agent, keyring, auth_server):
    """1000 records whose caller has a long executable path (and the newest a relay chain) are far more than one
    64 KiB reply line: `authctl audit` still shows all of them, newest last, in text and JSON."""
    agent = make_agent(start=False)
    # A copy of this interpreter under a 2.4 KB path (the kernel names the copy's path, not the original's).
    directory = agent.base.joinpath(*[f"{n:02d}-" + "long-directory-name-" * 10 for n in range(12)])
    directory.mkdir(parents=True, mode=0o700)
    client = directory / "ring-filler"
    shutil.copy2(os.path.realpath(sys.executable), client)
    agent.write_config(agent.config_path.read_text() + f'allowed_clients = ["{client}"]\n')
    agent.start()
    agent.login("work")
    agent.remember(keyring.secret_tool_lookup("work", auth_server.issuer))
    agent.remember(*auth_server.issued_secrets())

    relay = str(agent.bins.resolve() / "authctl")
    filled = subprocess.run([str(client), "-c", RING_FILLER, str(agent.socket_path), "1000", relay, "3"],
                            env=dict(agent.env, PYTHONHOME=sys.base_prefix), capture_output=True, text=True,
                            timeout=60, stdin=subprocess.DEVNULL)
    assert filled.returncode == 0, filled.stderr[-2000:]
    assert filled.stdout.split() == ["1000", "3"], "every request served"

    result = agent.authctl("audit", "--json")
    assert result.returncode == 0, result.stderr
    assert len(result.stdout) > 10 * 65536, "far more than one reply line may hold"
    document = json.loads(result.stdout)
    entries = document["entries"]
    assert document["capacity"] == 1000 and "next" not in document
    assert len(entries) == 1000, "the ring is full: the 3 oldest of 1003 records are gone"
    assert {(e["outcome"], e["reason"], e["caller"]["exe"]) for e in entries} == {("granted", "listed", str(client))}
    assert [e["caller"].get("relayed_by") for e in entries[-4:]] == [None, [relay], [relay], [relay]], "newest last"
    assert len({e["caller"]["pid"] for e in entries[-3:]}) == 3
    assert [e["time"] for e in entries] == sorted(e["time"] for e in entries)

    human = agent.authctl("audit")
    assert human.returncode == 0, human.stderr
    rows = human.stdout.splitlines()
    assert rows[0].startswith("TIME") and len(rows) == 1001
    assert rows[-1].rstrip().endswith(f"pid {entries[-1]['caller']['pid']}") and f"{client} via authctl" in rows[-1]
    assert_no_token_in(agent, result.stdout, human.stdout)


def test_a_binary_replaced_while_it_runs_no_longer_matches(make_agent, keyring, auth_server):
    """The allow-listed path names a copy of the Python interpreter; a client started from it is served, one whose
    file was replaced after it started is not (the kernel reports its executable as deleted)."""
    agent = make_agent(start=False)
    interpreter = agent.base / "allowed" / "python3"
    interpreter.parent.mkdir(mode=0o700)
    shutil.copy2(os.path.realpath("/usr/bin/python3"), interpreter)
    agent.write_config(agent.config_path.read_text() + f'allowed_clients = ["{interpreter}"]\n')
    agent.start()
    agent.login("work")
    agent.remember(keyring.secret_tool_lookup("work", auth_server.issuer))

    def client():
        return subprocess.Popen([str(interpreter), "-c", CLIENT, str(agent.socket_path)], env=agent.env,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    served = client()
    out, err = served.communicate("go\n", timeout=60)
    reply = json.loads(out)
    assert "result" in reply, (reply, err)
    agent.remember(reply["result"]["access_token"])

    replaced = client()
    time.sleep(0.2)  # let it start from the original file; not a timing assertion (a late start only weakens the test)
    os.unlink(interpreter)  # what an upgrade (or an attacker) replacing the file does to the running one
    shutil.copy2(os.path.realpath("/usr/bin/python3"), interpreter)
    out, err = replaced.communicate("go\n", timeout=60)
    reply = json.loads(out)
    assert reply["error"]["code"] == "access_denied", (reply, err)
    assert "deleted or replaced" in reply["error"]["message"]
    entries = audit(agent)
    assert [(e["outcome"], e["reason"]) for e in entries] == [("granted", "listed"), ("denied", "unidentified")]
    assert entries[1]["caller"]["exe_deleted"] is True
    assert_no_token_in(agent, json.dumps(entries))


def test_a_connection_whose_process_exited_is_not_served(make_agent, keyring, auth_server):
    """A recycled or handed-over pid cannot pass for the process that connected: a forked child connects, is
    served, passes the connection to the test, writes one more request and exits before the agent reads it (the
    agent is stopped meanwhile): that request is refused as `process_exited`. (Requests the test itself writes on
    the connection are another process's: test_hostile_identity.py.)"""
    agent = make_agent(start=False)
    python = os.path.realpath("/proc/self/exe")
    agent.write_config(agent.config_path.read_text() + f'allowed_clients = ["{python}"]\n')
    agent.start()
    agent.login("work")
    agent.remember(keyring.secret_tool_lookup("work", auth_server.issuer))

    def request(request_id: int) -> bytes:
        return json.dumps({"v": 1, "id": request_id, "op": "token", "account": "work"}).encode() + b"\n"

    def reply(conn) -> dict:
        line = b""
        while not line.endswith(b"\n"):
            chunk = conn.recv(65536)
            assert chunk, "the agent closed the connection without a reply"
            line += chunk
        return json.loads(line)

    parent_end, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    go = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: connect, ask, hand the connection over, ask again when told, exit
        try:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(str(agent.socket_path))
            s.sendall(request(1))
            served = reply(s)
            socket.send_fds(child_end, [json.dumps(served).encode()], [s.fileno()])
            os.read(go[0], 1)
            s.sendall(request(2))
        finally:
            os._exit(0)
    message, fds, _, _ = socket.recv_fds(parent_end, 65536, 1)
    conn = socket.socket(fileno=fds[0])
    conn.settimeout(30)
    alive = json.loads(message)
    assert "result" in alive, alive
    agent.remember(alive["result"]["access_token"])

    stop_process(agent.proc.pid)  # so that it reads request 2 only after the child has exited
    try:
        os.write(go[1], b"x")
        os.waitpid(pid, 0)
    finally:
        os.kill(agent.proc.pid, signal.SIGCONT)
    gone = reply(conn)
    assert gone["error"]["code"] == "access_denied", gone
    assert "has exited" in gone["error"]["message"]
    conn.close()
    print(agent.authctl("audit").stdout)
    reasons = [(e["outcome"], e["reason"], e["caller"]["pid"]) for e in audit(agent)]
    assert reasons == [("granted", "listed", pid), ("denied", "process_exited", pid)]
    assert_no_token_in(agent, json.dumps(audit(agent)))


@pytest.fixture
def confirming_agent(make_agent, keyring, auth_server):
    def factory(timeout: int = 30, bus=None):
        agent = make_agent(work={"confirm": "first-use"}, agent={"consent_timeout": timeout},
                           **({"bus": bus} if bus else {}))
        agent.login("work")
        agent.remember(keyring.secret_tool_lookup("work", auth_server.issuer))
        return agent
    return factory


def test_first_use_is_approved_from_a_terminal_and_remembered(confirming_agent):
    agent = confirming_agent(timeout=60)
    waiting = agent.authctl_popen("token", "work")
    prompt = read_until(waiting.stderr, "in a terminal", 30)
    [pending] = json.loads(agent.authctl("pending", "--json").stdout)["requests"]
    assert f"authctl approve {pending['id']}" in prompt
    # The question is about the program that ran authctl (this test's interpreter), and names the chain.
    assert pending["account"] == "work" and pending["client"] == os.readlink("/proc/self/exe")
    assert pending["caller"]["pid"] == waiting.pid
    assert pending["caller"]["relayed_by"] == [str(agent.bins.resolve() / "authctl")]
    assert f"{pending['client']} via authctl pid {waiting.pid}" in agent.authctl("pending").stdout

    # A background program (no controlling terminal) cannot answer for the user.
    background = subprocess.run([str(agent.bins / "authctl"), "approve", str(pending["id"])], env=agent.env,
                                capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL,
                                start_new_session=True)  # no controlling terminal, whatever runs the tests
    assert background.returncode == 9, background
    assert "terminal" in background.stderr

    rc, output = run_in_terminal(agent, "approve", str(pending["id"]))
    assert rc == 0, output
    assert "Allowed" in output
    out, err = waiting.communicate(timeout=60)
    assert waiting.returncode == 0, err
    agent.remember(out.strip())

    # Remembered: no question the second time, and after a restart.
    assert agent.token("work")
    agent.restart()
    assert agent.token("work")
    state = agent.home / ".local" / "state" / "auth-agent" / "consent.json"
    assert oct(state.stat().st_mode & 0o777) == "0o600"
    decisions = json.loads(state.read_text())["decisions"]
    assert [(d["account"], d["client"], d["allowed"]) for d in decisions] == [("work", pending["client"], True)]

    # Forget (from a terminal): asked again.
    rc, output = run_in_terminal(agent, "forget", "--account", "work")
    assert rc == 0 and "Forgot" in output, output
    again = agent.authctl_popen("token", "work")
    read_until(again.stderr, "in a terminal", 30)
    [second] = json.loads(agent.authctl("pending", "--json").stdout)["requests"]
    rc, output = run_in_terminal(agent, "deny", str(second["id"]))
    assert rc == 0, output
    out, err = again.communicate(timeout=60)
    assert again.returncode == 7 and out == "", err
    assert "you denied it" in err

    print(agent.authctl("audit").stdout)  # the report quotes a real run
    reasons = [(e["outcome"], e["reason"]) for e in audit(agent)]
    assert reasons[-1] == ("denied", "denied_by_user")
    assert ("granted", "approved") in reasons
    assert_no_token_in(agent, json.dumps(audit(agent)), state.read_text())


def test_first_use_times_out_as_access_denied(confirming_agent):
    agent = confirming_agent(timeout=2)
    result = agent.authctl("token", "work", timeout=30)
    assert result.returncode == 7, result
    assert "nobody allowed it within 2 s" in result.stderr
    assert json.loads(agent.authctl("pending", "--json").stdout)["requests"] == []
    [entry] = audit(agent)
    assert (entry["outcome"], entry["reason"]) == ("denied", "consent_timeout")
    # A timeout is not a decision, but the program is not asked again at once (issue 53): for a minute it is refused
    # saying when it may ask; `forget` (with no decision to drop) ends that, and it is asked again.
    held = agent.authctl("token", "work", timeout=30)
    assert held.returncode == 7 and "may ask again in" in held.stderr, held.stderr
    assert "Waiting for your permission" not in held.stderr, held.stderr
    rc, output = run_in_terminal(agent, "forget", "--account", "work")
    assert rc == 0, output
    assert "Waiting for your permission" in agent.authctl("token", "work", timeout=30).stderr


def pending_requests(agent) -> list[dict]:
    result = agent.authctl("pending", "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["requests"]


def test_a_request_whose_client_is_killed_while_waiting_is_withdrawn(confirming_agent):
    """The client that asked dies while its consent question is open: the question is withdrawn at once (not left
    until consent_timeout), audited as `withdrawn`, and a late approve finds nothing to answer, so nothing is
    remembered for a program nobody waits for."""
    agent = confirming_agent(timeout=600)  # far beyond the test's waits: only the withdrawal can end the question
    waiting = agent.authctl_popen("token", "work")
    read_until(waiting.stderr, "in a terminal", 30)
    [pending] = pending_requests(agent)
    assert pending["caller"]["pid"] == waiting.pid
    waiting.kill()
    waiting.wait(timeout=10)
    wait_for(lambda: pending_requests(agent) == [], 30, "the question of a killed client to be withdrawn")

    entries = audit(agent)
    assert [(e["outcome"], e["reason"], e["caller"]["pid"]) for e in entries] == [("withdrawn", "cancelled", waiting.pid)]
    assert "withdrawn (cancelled)" in agent.authctl("audit").stdout
    assert "token request withdrawn" in agent.log() and "withdrew a consent question" in agent.log()
    rc, output = run_in_terminal(agent, "approve", str(pending["id"]))
    assert rc == 9 and f"no pending request {pending['id']}" in output, output
    assert not (agent.home / ".local" / "state" / "auth-agent" / "consent.json").exists(), "nothing was decided"

    # Not remembered: the next request of the same program is asked about again (and withdrawn in turn).
    again = agent.authctl_popen("token", "work")
    read_until(again.stderr, "in a terminal", 30)
    assert len(pending_requests(agent)) == 1
    again.kill()
    again.wait(timeout=10)
    wait_for(lambda: pending_requests(agent) == [], 30, "the second question to be withdrawn")
    assert [e["outcome"] for e in audit(agent)] == ["withdrawn", "withdrawn"]


def test_a_dbus_caller_that_leaves_the_bus_while_waiting_is_withdrawn(confirming_agent, keyring):
    agent = confirming_agent(timeout=600)
    env = {"PATH": SYSTEM_PATH, "DBUS_SESSION_BUS_ADDRESS": keyring.address, "LANG": "C.UTF-8"}
    call = subprocess.Popen(["gdbus", "call", "--session", "--timeout", "600", "--dest", "dev.authagent.Agent",
                             "--object-path", "/dev/authagent/Agent1", "--method",
                             "dev.authagent.Agent1.GetAccessToken", "work", "0"],
                            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    wait_for(lambda: len(pending_requests(agent)) == 1, 30, "the D-Bus caller's consent question")
    [pending] = pending_requests(agent)
    assert pending["caller"]["via"] == "dbus" and pending["caller"]["pid"] == call.pid
    call.kill()  # its connection to the bus closes: NameOwnerChanged for its unique name
    call.wait(timeout=10)
    wait_for(lambda: pending_requests(agent) == [], 30, "the question of a caller that left the bus to be withdrawn")
    [entry] = audit(agent)
    assert (entry["outcome"], entry["reason"], entry["caller"]["via"]) == ("withdrawn", "cancelled", "dbus")


def cgroup_mounts() -> dict[str, Path]:
    """The writable hierarchies systemd keeps units in: `unified` (cgroup2) and `systemd` (v1 name=systemd)."""
    found = {}
    for line in Path("/proc/self/mounts").read_text().splitlines():
        _, where, kind, options = line.split()[:4]
        if kind == "cgroup2":
            found.setdefault("unified", Path(where))
        elif kind == "cgroup" and "name=systemd" in options.split(","):
            found.setdefault("systemd", Path(where))
    return found


class UnitCgroup:
    """A service's cgroup made the way systemd makes it (a fresh top slice per test, so parallel runs do not meet),
    in the chosen hierarchies; removed again, innermost first, by `remove`."""

    def __init__(self, roots: list[Path], unit: str):
        top = f"aa-e2e-{secrets.token_hex(4)}.slice"
        self.relative = Path(top) / f"user-{os.getuid()}.slice" / f"user@{os.getuid()}.service" / "app.slice" / unit
        self.roots = roots
        for root in roots:
            (root / self.relative).mkdir(parents=True)

    def procs_files(self) -> list[str]:
        return [str(root / self.relative / "cgroup.procs") for root in self.roots]

    def remove(self):
        for root in self.roots:
            path = root / self.relative
            while path != root:
                try:
                    path.rmdir()
                except FileNotFoundError:
                    pass
                path = path.parent


def run_in_cgroup(cgroup: UnitCgroup | None, binary, agent, *args) -> tuple[subprocess.CompletedProcess, int]:
    """Runs `binary` moved into `cgroup` (every hierarchy given) before it executes, so before it connects."""
    files = cgroup.procs_files() if cgroup else []

    def join():
        for name in files:
            with open(name, "w") as f:
                f.write(str(os.getpid()))

    proc = subprocess.Popen([str(binary), *args], env=agent.env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=join)
    out, err = proc.communicate(timeout=60)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), proc.pid


def test_a_caller_in_a_real_service_cgroup_matches_a_unit_rule(make_agent, keyring, auth_server):
    """`unit:mbsync.service` admits the built authctl when it runs in that unit's cgroup and refuses the very same
    binary outside it. The unit's cgroup is real (this container's /sys/fs/cgroup, where no systemd runs), made in
    each layout systemd uses: both hierarchies (hybrid), the cgroup2 one only (unified), the v1 name=systemd one
    only (legacy, with the cgroup2 file system mounted but unused: `0::/`)."""
    mounts = cgroup_mounts()
    probe = None
    try:
        if not mounts:
            raise PermissionError("no cgroup2 or name=systemd hierarchy is mounted")
        probe = UnitCgroup(list(mounts.values()), "probe.service")
    except OSError as e:
        pytest.skip(f"the cgroup file system is not writable here, so no caller can be put in a unit: {e}")
    finally:
        if probe:
            probe.remove()
    layouts = {"hybrid": list(mounts.values())}
    if "unified" in mounts:
        layouts["unified"] = [mounts["unified"]]
    own_unified = [l[3:] for l in Path("/proc/self/cgroup").read_text().splitlines() if l.startswith("0::")]
    if "systemd" in mounts and own_unified in ([], ["/"]):  # else our own cgroup2 path would name the caller's unit
        layouts["legacy"] = [mounts["systemd"]]

    agent = make_agent(start=False)
    # A copy: the agent's own authctl would be judged by the program that ran it (this test), not by its own unit.
    authctl = copy_authctl(agent, "copy")
    agent.write_config(agent.config_path.read_text() + 'allowed_clients = ["unit:mbsync.service"]\n')
    agent.start()
    agent.login("work")
    agent.remember(keyring.secret_tool_lookup("work", auth_server.issuer))

    expected = []
    for name, roots in layouts.items():
        cgroup = UnitCgroup(roots, "mbsync.service")
        try:
            served, pid = run_in_cgroup(cgroup, authctl, agent, "token", "work")
        finally:
            cgroup.remove()
        assert served.returncode == 0, (name, served.stderr)
        agent.remember(served.stdout.strip())
        expected.append(("granted", "listed", pid, "mbsync.service"))

        # A unit of another name, same binary: refused.
        other = UnitCgroup(roots, "offlineimap.service")
        try:
            refused, pid = run_in_cgroup(other, authctl, agent, "token", "work")
        finally:
            other.remove()
        assert refused.returncode == 7 and refused.stdout == "", (name, refused)
        expected.append(("denied", "not_listed", pid, "offlineimap.service"))

    # The same binary outside any unit: refused, and the message says a unit: entry is possible.
    outside, pid = run_in_cgroup(None, authctl, agent, "token", "work")
    assert outside.returncode == 7 and outside.stdout == "", outside
    assert "unit:NAME" in outside.stderr

    entries = audit(agent)
    assert [(e["outcome"], e["reason"], e["caller"]["pid"], e["caller"].get("unit")) for e in entries[:-1]] == expected
    last = entries[-1]
    assert (last["outcome"], last["reason"], last["caller"]["pid"]) == ("denied", "not_listed", pid)
    assert last["caller"].get("unit") != "mbsync.service"  # none here; a CI runner's own unit elsewhere
    human = agent.authctl("audit").stdout
    print(human)  # the report quotes a real run
    assert "unit:mbsync.service" in human and "granted (listed)" in human
    assert "peer_unit=mbsync.service" in agent.log()
    assert_no_token_in(agent, json.dumps(entries), human)


@pytest.fixture
def notification_server(keyring, tmp_path):
    log = tmp_path / "notify.jsonl"
    log.touch()
    env = {"PATH": SYSTEM_PATH, "DBUS_SESSION_BUS_ADDRESS": keyring.address, "LANG": "C.UTF-8"}
    proc = subprocess.Popen(["/usr/bin/python3", str(FAKE_NOTIFICATIONS), str(log), "actions,body"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        read_until(proc.stdout, "ready", 20)
        proc.log, proc.env = log, env
        yield proc
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_first_use_is_allowed_from_the_notification(confirming_agent, notification_server):
    agent = confirming_agent(timeout=60)
    waiting = agent.authctl_popen("token", "work")

    def consent_notifications():
        lines = [json.loads(l) for l in notification_server.log.read_text().splitlines()]
        return [n for n in lines if "summary" in n and n["summary"].startswith("Allow ")]

    wait_for(lambda: len(consent_notifications()) == 1, 20, "the consent notification")
    [shown] = consent_notifications()
    assert shown["actions"] == ["consent-allow", "Allow", "consent-deny", "Deny"]
    assert "'work'" in shown["body"] and "authctl approve" in shown["body"]
    out = subprocess.run(["gdbus", "call", "--session", "--dest", "org.freedesktop.Notifications",
                          "--object-path", "/org/freedesktop/Notifications", "--method", "dev.authagent.Test.Invoke",
                          str(shown["id"]), "consent-allow"], env=notification_server.env, capture_output=True,
                         text=True, timeout=15)
    assert out.returncode == 0, out.stderr
    token, err = waiting.communicate(timeout=60)
    assert waiting.returncode == 0, err
    agent.remember(token.strip())
    wait_for(lambda: {"closed": shown["id"]} in [json.loads(l) for l in notification_server.log.read_text().splitlines()],
             10, "the answered notification to be closed")
    assert [(e["outcome"], e["reason"]) for e in audit(agent)] == [("granted", "approved")]
    assert_no_token_in(agent, notification_server.log.read_text(), json.dumps(audit(agent)))


def test_dbus_callers_are_identified_and_judged(make_agent, keyring, auth_server):
    agent = make_agent(start=False)
    allowed = copy_authctl(agent, "allowed")
    agent.write_config(agent.config_path.read_text() + f'allowed_clients = ["{allowed}"]\n')
    agent.start()
    agent.login("work")
    agent.remember(keyring.secret_tool_lookup("work", auth_server.issuer))
    env = {"PATH": SYSTEM_PATH, "DBUS_SESSION_BUS_ADDRESS": keyring.address, "LANG": "C.UTF-8"}
    call = subprocess.run(["gdbus", "call", "--session", "--dest", "dev.authagent.Agent", "--object-path",
                           "/dev/authagent/Agent1", "--method", "dev.authagent.Agent1.GetAccessToken", "work", "0"],
                          env=env, capture_output=True, text=True, timeout=60)
    assert call.returncode != 0
    assert "dev.authagent.Error.AccessDenied" in call.stderr, call.stderr
    [entry] = audit(agent)
    assert entry["caller"]["via"] == "dbus"
    assert entry["caller"]["exe"] == os.path.realpath(shutil.which("gdbus", path=SYSTEM_PATH))
    assert (entry["outcome"], entry["reason"]) == ("denied", "not_listed")
    granted = run(allowed, agent, "token", "work")
    assert granted.returncode == 0, granted.stderr
    agent.remember(granted.stdout.strip())
    print(agent.authctl("audit", "--since", "1h").stdout)
    assert_no_token_in(agent, json.dumps(audit(agent)))


def test_without_allowed_clients_anyone_is_served_and_status_says_so(signed_in_agent):
    agent = signed_in_agent
    assert agent.token("work")
    assert agent.account_status("work")["access"] == {
        "open": True, "confirm": "never", "summary": "any process of yours (no allowed_clients); sandboxed apps, containers and forwarded hosts are asked"}
    assert "any process of yours (no allowed_clients); sandboxed apps, containers and forwarded hosts are asked" in agent.authctl("status").stdout
    [entry] = audit(agent)
    assert (entry["outcome"], entry["reason"]) == ("granted", "open")
    assert_no_token_in(agent, json.dumps(audit(agent)), agent.authctl("audit").stdout)
