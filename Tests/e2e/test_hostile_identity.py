"""Hostile callers against identification (issue 21): what a same-user client controls (its own root directory in a
user namespace, the processes that hold its connection, the pid it leaves behind) must neither stall the agent nor
pass for an allowed program. Real clients, real namespaces (`unshare -Urm`), the real agent, keyring and server."""
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import bin_dir, stop_process, wait_for

# Every test here runs on both identity paths: with SO_PEERPIDFD, and as on kernels without it.
pytestmark = [pytest.mark.usefixtures("kernel_paths"), pytest.mark.release]  # also against the installed package

# Run inside `unshare -Urm` (own user and mount namespace): a tmpfs at DIR with `.flatpak-info` of the given kind,
# chroot into it, connect to the agent's socket (reached through a directory descriptor opened before the chroot)
# and ask for a token. Prints "connected" once connected, then the reply line (if one comes).
CHROOTED_CLIENT = r"""
import ctypes, json, os, socket, sys
root, socket_dir, kind = sys.argv[1], sys.argv[2], sys.argv[3]
libc = ctypes.CDLL(None, use_errno=True)
if libc.mount(b"tmpfs", root.encode(), b"tmpfs", 0, b"mode=0755") != 0:
    raise OSError(ctypes.get_errno(), "mount tmpfs")
info = os.path.join(root, ".flatpak-info")
if kind == "fifo":
    os.mkfifo(info)
elif kind == "symlink":
    os.mkfifo(os.path.join(root, "pipe"))
    os.symlink("/pipe", info)
elif kind == "regular":
    with open(info, "w") as f:
        f.write("[Application]\nname=org.example.Chrooted\n")
directory = os.open(socket_dir, os.O_RDONLY | os.O_DIRECTORY)
os.chroot(root)
os.fchdir(directory)  # the socket stays reachable by a relative path
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect("agent.sock")
print("connected", flush=True)
s.sendall(json.dumps({"v": 1, "id": 1, "op": "token", "account": "work"}).encode() + b"\n")
line = b""
while not line.endswith(b"\n"):
    chunk = s.recv(65536)
    if not chunk:
        break
    line += chunk
print(line.decode().strip(), flush=True)
"""


def chrooted_client(agent, tmp_path, kind: str) -> subprocess.Popen:
    if not shutil.which("unshare"):
        pytest.skip("util-linux unshare is not installed")
    root = tmp_path / f"root-{kind}-{time.monotonic_ns()}"
    root.mkdir()
    return subprocess.Popen(["unshare", "-Urm", "/usr/bin/python3", "-c", CHROOTED_CLIENT, str(root),
                             str(agent.socket_path.parent), kind],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def audit(agent) -> list[dict]:
    result = agent.authctl("audit", "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["entries"]


def test_a_chrooted_client_with_a_fifo_for_flatpak_info_stalls_nobody(make_agent, keyring, auth_server, tmp_path):
    """Defect 1: the agent reads `/.flatpak-info` in the caller's root. A client in its own user namespace with a
    FIFO (or a symlink to one) there must not freeze the agent: while such clients wait connected, `authctl token`
    and `ping` are answered within 2 s. A regular file in the same set-up is read (the path is exercised: the
    audit names the app it declares, and its `flatpak:` entry serves it). The account lists that app and the
    agent's authctl (for this test's own requests): a sandboxed app is served by its entry or the user's consent,
    never by an account's "any program of yours" (issue 46)."""
    allowed = [os.path.realpath(bin_dir() / "authctl"), "flatpak:org.example.Chrooted"]
    agent = make_agent(work={"allowed_clients": allowed})
    agent.login("work")
    agent.remember(keyring.secret_tool_lookup("work", auth_server.issuer))
    token = agent.token("work")

    control = chrooted_client(agent, tmp_path, "regular")
    out, err = control.communicate(timeout=30)
    if control.returncode != 0 and "connected" not in out:
        pytest.skip(f"cannot make a user namespace with a tmpfs here: {err.strip()[-300:]}")
    reply = json.loads(out.splitlines()[-1])
    assert reply["result"]["access_token"] == token, reply
    assert audit(agent)[-1]["caller"].get("flatpak_app") == "org.example.Chrooted", \
        "the agent did not read the chrooted client's /.flatpak-info: this test would not exercise that read"

    # More than one: none of them may hold the accept loop, whatever each one's filesystem holds.
    hostile = [chrooted_client(agent, tmp_path, kind) for kind in ("fifo", "symlink", "fifo", "symlink")]
    try:
        for proc in hostile:
            line = proc.stdout.readline()
            assert line.strip() == "connected", (line, proc.stderr.read() if proc.poll() is not None else "")
        for _ in range(3):
            started = time.monotonic()
            result = agent.authctl("token", "work", timeout=10)
            elapsed = time.monotonic() - started
            assert result.returncode == 0 and result.stdout.strip() == token, result
            # The freeze this guards against lasts until the FIFO is opened, which it never is: 5 s tells it from
            # a slow machine.
            assert elapsed < 5, f"authctl token took {elapsed:.1f} s while hostile clients were connected"
            started = time.monotonic()
            with agent.connect(timeout=5) as s:
                s.sendall(b'{"v":1,"id":9,"op":"ping"}\n')
                assert b'"protocol"' in s.recv(65536)
            assert time.monotonic() - started < 5
        # The hostile clients themselves are answered too, not left hanging: refused, as a sandbox whose
        # /.flatpak-info cannot be read is confined and named by nothing (issues 46, 53).
        for proc in hostile:
            # Read through the same buffered reader as "connected" (communicate() would skip what it holds).
            reply = json.loads(proc.stdout.readline())
            assert "result" not in reply, "a hostile client whose root names no app was served"
            assert reply["error"]["code"] == "access_denied", reply["error"]
            assert "/.flatpak-info is not a readable regular file" in reply["error"]["message"], reply["error"]
            proc.wait(timeout=10)
        assert [e["reason"] for e in audit(agent)].count("unidentified") == len(hostile)
    finally:
        for proc in hostile:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
    agent.remember(token)


# Connects, forks a helper that keeps the socket, and execs the allowed program argv[2] (which writes nothing). The
# helper waits until its parent runs that program, writes the token request, says "written", and prints the reply.
HELPER_WRITES = r"""
import json, os, socket, sys
sock, allowed = sys.argv[1], sys.argv[2]
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(sock)
parent = os.getpid()
if os.fork() == 0:
    import time
    deadline = time.monotonic() + 20
    while os.readlink(f"/proc/{parent}/exe") != allowed:
        assert time.monotonic() < deadline, "the parent never ran the allowed program"
        time.sleep(0.01)
    s.sendall(json.dumps({"v": 1, "id": 5, "op": "token", "account": "work"}).encode() + b"\n")
    print("written", flush=True)
    line = b""
    while not line.endswith(b"\n"):
        chunk = s.recv(65536)
        if not chunk:
            break
        line += chunk
    print(line.decode().strip(), flush=True)
    os._exit(0)
os.execv(allowed, [allowed, "60"])
"""


def copy_of(program: str, where: Path) -> Path:
    """A copy of `program` in a directory of its own under `where` (an allowed binary no other test process runs)."""
    copy = where / Path(program).name
    copy.parent.mkdir(mode=0o700)
    shutil.copy2(os.path.realpath(program), copy)
    return copy


def signed_in_allowing_a_copy_of_sleep(make_agent, keyring, auth_server):
    """An agent whose `work` allows only a copy of sleep, signed in; returns (agent, the copy's path)."""
    agent = make_agent(start=False)
    allowed = copy_of("/usr/bin/sleep", agent.base / "allowed")
    agent.write_config(agent.config_path.read_text() + f'allowed_clients = ["{allowed}"]\n')
    agent.start()
    agent.login("work")
    agent.remember(keyring.secret_tool_lookup("work", auth_server.issuer))
    return agent, allowed


def assert_helper_request_refused(agent, helper: str, allowed: Path, first_line: str, code="permission_denied",
                                  prefix: tuple[str, ...] = (), says: str = "") -> int:
    """Runs `helper` (HELPER_WRITES...: a program that connects, forks a helper and execs `allowed`), after `prefix`
    (a command that runs it), with the agent stopped until the helper prints `first_line`: the agent identifies a
    connection when it accepts it, so it accepts this one only after the exec, as a busy agent might. Asserts that
    the helper's token request was refused with `code` and a message containing `says` (the reply itself is never
    printed: it may hold a token); returns the attacker's pid."""
    stop_process(agent.proc.pid)
    try:
        attack = subprocess.Popen([*prefix, "/usr/bin/python3", "-c", helper, str(agent.socket_path), str(allowed)],
                                  stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert attack.stdout.readline().strip() == first_line, \
            attack.stderr.read() if attack.poll() is not None else ""
    finally:
        os.kill(agent.proc.pid, signal.SIGCONT)
    try:
        line = attack.stdout.readline()
    finally:
        attack.kill()
        attack.wait(timeout=10)
    assert line, "no reply to the helper's request"
    reply = json.loads(line)
    agent.remember(*[v for k, v in (reply.get("result") or {}).items() if k.endswith("token") and isinstance(v, str)])
    served = "result" in reply
    assert not served, "the helper's request was served as the allowed binary"
    assert reply["error"]["code"] == code, reply
    assert says in reply["error"]["message"], reply
    return attack.pid


def test_a_request_written_by_a_helper_that_kept_the_socket_is_refused(make_agent, keyring, auth_server):
    """Defect 4: a program connects, forks a helper that keeps the socket, and execs an allowed binary; the helper
    writes the request. The writer is not the process the connection was identified as: `permission_denied`, and
    the audit says so (`other_sender`) instead of granting the allowed binary. The allowed binary itself is served."""
    agent = make_agent(start=False)
    allowed = copy_of("/usr/bin/sleep", agent.base / "allowed")
    listed = copy_of("/usr/bin/python3", agent.base / "listed")
    agent.write_config(agent.config_path.read_text() + f'allowed_clients = ["{allowed}", "{listed}"]\n')
    agent.start()
    agent.login("work")
    agent.remember(keyring.secret_tool_lookup("work", auth_server.issuer))

    # The honest case: the process that connected writes its own request.
    honest = subprocess.run([str(listed), "-c", "import json, socket, sys\n"
                             "s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])\n"
                             "s.sendall(b'{\"v\":1,\"id\":1,\"op\":\"token\",\"account\":\"work\"}\\n')\n"
                             "print(s.makefile().readline().strip())", str(agent.socket_path)],
                            capture_output=True, text=True, timeout=30)
    token = json.loads(honest.stdout)["result"]["access_token"]
    agent.remember(token)

    # (Identified before the exec, the caller is python and refused as not listed.)
    attacker = assert_helper_request_refused(agent, HELPER_WRITES, allowed, "written")
    entries = audit(agent)
    assert [(e["outcome"], e["reason"]) for e in entries] == [("granted", "listed"), ("denied", "other_sender")]
    # Identified as the allowed binary where a pidfd vouches for the read; without one, the exec'd process does not
    # hold the socket (close-on-exec), so the connection cannot be tied to it and nothing is named.
    assert entries[-1]["caller"]["pid"] == attacker
    assert entries[-1]["caller"].get("exe") in (str(allowed), None)
    assert "refused a request written by another process" in agent.log()


# Like HELPER_WRITES, but the connecting process first writes a `ping` itself (its own request, which sends the
# connection down the slow path) and keeps the socket across its exec (inheritable: on kernels without a pidfd the
# exec'd program then holds it and the connection is tied to it). The helper says "ready" once its parent runs the
# allowed program, reads the ping's reply, then writes the token request and prints its reply.
HELPER_WRITES_AFTER_SLOW_REQUEST = r"""
import json, os, socket, sys
sock, allowed = sys.argv[1], sys.argv[2]
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(sock)
os.set_inheritable(s.fileno(), True)
s.sendall(b'{"v":1,"id":4,"op":"ping"}\n')
parent = os.getpid()
if os.fork() == 0:
    import time
    deadline = time.monotonic() + 20
    while os.readlink(f"/proc/{parent}/exe") != allowed:
        assert time.monotonic() < deadline, "the parent never ran the allowed program"
        time.sleep(0.01)
    print("ready", flush=True)
    reader = s.makefile("rb")
    assert b'"protocol"' in reader.readline(), "no ping reply"
    s.sendall(json.dumps({"v": 1, "id": 5, "op": "token", "account": "work"}).encode() + b"\n")
    print(reader.readline().decode().strip(), flush=True)
    os._exit(0)
os.execv(allowed, [allowed, "60"])
"""


def test_a_request_written_by_a_helper_after_a_slow_request_is_refused(make_agent, keyring, auth_server):
    """Defect 4 after a slow request: the connecting process writes a `ping` itself (answered by a task), execs an
    allowed binary, and its helper writes the token request afterwards. Every read of the connection, before and
    after a slow request, checks the sender."""
    agent, allowed = signed_in_allowing_a_copy_of_sleep(make_agent, keyring, auth_server)
    assert_helper_request_refused(agent, HELPER_WRITES_AFTER_SLOW_REQUEST, allowed, "ready")


# HELPER_WRITES_AFTER_SLOW_REQUEST's attack without the slow request, run in a pid namespace made in a user namespace
# of its own (`unshare -Urpf`), where the helper holds CAP_SYS_ADMIN over the pid namespace: it attaches
# credentials naming its parent's pid (`SCM_CREDENTIALS`), which the kernel then accepts as the sender.
HELPER_FORGES_ITS_SENDER = r"""
import json, os, socket, struct, sys
sock, allowed = sys.argv[1], sys.argv[2]
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(sock)
os.set_inheritable(s.fileno(), True)
here, seen = os.getpid(), os.readlink("/proc/self")  # the parent's pid in this namespace, and as /proc shows it
if os.fork() == 0:
    import time
    deadline = time.monotonic() + 20
    while os.readlink(f"/proc/{seen}/exe") != allowed:
        assert time.monotonic() < deadline, "the parent never ran the allowed program"
        time.sleep(0.01)
    request = json.dumps({"v": 1, "id": 5, "op": "token", "account": "work"}).encode() + b"\n"
    claimed = struct.pack("iII", here, os.getuid(), os.getgid())
    s.sendmsg([request], [(socket.SOL_SOCKET, socket.SCM_CREDENTIALS, claimed)])
    print("written", flush=True)
    print(s.makefile("rb").readline().decode().strip(), flush=True)
    os._exit(0)
os.execv(allowed, [allowed, "60"])
"""


def test_a_helper_that_claims_its_parents_pid_from_a_pid_namespace_of_its_own_is_refused(make_agent, keyring,
                                                                                          auth_server):
    """Defect 4 through a namespace: in a pid namespace made in a user namespace of its own, the helper may attach
    credentials naming the connecting process, and the kernel stamps its bytes with that pid. The sender check
    cannot tell, so a caller in such a namespace is not identified by its path: the allowed binary's connection is
    `access_denied`, and the audit says why."""
    if not shutil.which("unshare"):
        pytest.skip("util-linux unshare is not installed")
    agent, allowed = signed_in_allowing_a_copy_of_sleep(make_agent, keyring, auth_server)
    assert_helper_request_refused(agent, HELPER_FORGES_ITS_SENDER, allowed, "written", code="access_denied",
                                  prefix=("unshare", "-Urpf", "--kill-child"), says="pid namespace of its own")
    [entry] = audit(agent)
    assert (entry["outcome"], entry["reason"]) == ("denied", "unidentified"), entry
    assert entry["caller"].get("exe") == str(allowed) and entry["caller"]["kind"] == "container", entry


def spawn_at_pid(pid: int, argv: list[str], attempts: int = 200) -> subprocess.Popen | None:
    """Starts argv as process `pid` (free again), through /proc/sys/kernel/ns_last_pid: the next process created
    gets the number after it. Other processes on the machine may take it first: tried again, bounded. None when one
    took it and still runs (a process or a thread: /proc/PID exists), since no attempt can get it then."""
    for _ in range(attempts):
        if os.path.exists(f"/proc/{pid}"):
            return None
        with open("/proc/sys/kernel/ns_last_pid", "w") as f:
            f.write(str(pid - 1))
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if proc.pid == pid:
            return proc
        proc.kill()
        proc.wait(timeout=10)
    pytest.fail(f"could not start a process as pid {pid} in {attempts} attempts (a busy machine takes the pids)")


def test_a_connection_whose_pid_was_recycled_by_an_allowed_program_is_refused(make_agent, keyring, auth_server):
    """Defects 2 and 6: a client connects, writes its request and exits before the agent accepts the connection (the
    agent is stopped meanwhile); its pid is then taken by an allowed program (a copy of sleep). Whatever `/proc/PID`
    now says is that program's, consistently: the connection must be tied to the live process (a pidfd, or the
    process holding the connection's other end) or refused. On both kernel paths: `access_denied`, not a token.
    When another process on the machine takes the pid first and keeps it, another client does the same (each
    connection waits in the stopped agent's backlog; all of them must be refused)."""
    try:
        open("/proc/sys/kernel/ns_last_pid", "w").close()
    except OSError as e:
        pytest.skip(f"pids cannot be chosen here (needs root and a writable /proc/sys): {e}")
    agent, allowed = signed_in_allowing_a_copy_of_sleep(make_agent, keyring, auth_server)

    stop_process(agent.proc.pid)
    writers: list[int] = []
    recycled = None
    try:
        while recycled is None and len(writers) < 5:
            writer = subprocess.run(["/usr/bin/python3", "-c",
                                     "import os, socket, sys\n"
                                     "s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])\n"
                                     "s.sendall(b'{\"v\":1,\"id\":1,\"op\":\"token\",\"account\":\"work\"}\\n')\n"
                                     "print(os.getpid(), flush=True)\n",
                                     str(agent.socket_path)], capture_output=True, text=True, timeout=30)
            assert writer.returncode == 0, writer.stderr
            writers.append(int(writer.stdout))
            recycled = spawn_at_pid(writers[-1], [str(allowed), "60"])
        assert recycled is not None, f"every writer's pid ({writers}) was taken and kept by another process first"
    finally:
        os.kill(agent.proc.pid, signal.SIGCONT)
    try:
        wait_for(lambda: len(audit(agent)) >= len(writers), 20, "the recycled connections' requests to be judged")
        entries = audit(agent)
        assert len(entries) == len(writers) and all(e["outcome"] == "denied" for e in entries), entries
        [entry] = [e for e in entries if e["caller"].get("pid") == writers[-1]]
        assert (entry["outcome"], entry["reason"]) == ("denied", "process_exited"), entry
    finally:
        recycled.kill()
        recycled.wait(timeout=10)


def test_a_canonically_equivalent_path_is_another_program(make_agent, keyring, auth_server):
    """Defect 3: `allowed_clients` lists authctl under `café` with a precomposed é; the same binary under `café`
    spelled with e + combining acute (another directory to the kernel, equal as Swift text) is not served."""
    agent = make_agent(start=False)
    binaries = {}
    for name, spelling in (("precomposed", "caf\u00e9"), ("decomposed", "cafe\u0301")):
        directory = agent.base / spelling
        directory.mkdir(mode=0o700)
        binaries[name] = directory / "authctl"
        shutil.copy2(agent.bins / "authctl", binaries[name])
    assert os.fsencode(binaries["precomposed"]) != os.fsencode(binaries["decomposed"])
    agent.write_config(agent.config_path.read_text() + f'allowed_clients = ["{binaries["precomposed"]}"]\n')
    agent.start()
    agent.login("work")
    agent.remember(keyring.secret_tool_lookup("work", auth_server.issuer))

    def run(binary):
        return subprocess.run([str(binary), "token", "work"], env=agent.env, capture_output=True, text=True,
                              timeout=60, stdin=subprocess.DEVNULL)

    listed = run(binaries["precomposed"])
    assert listed.returncode == 0, listed.stderr
    agent.remember(listed.stdout.strip())
    other = run(binaries["decomposed"])
    agent.remember(other.stdout.strip())
    refused = other.returncode == 7 and other.stdout == ""  # `other` is not printed: it may hold a token
    assert refused, "the decomposed spelling was served as the listed path"
    assert [(e["outcome"], e["reason"]) for e in audit(agent)] == [("granted", "listed"), ("denied", "not_listed")]
