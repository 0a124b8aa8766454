"""Hostile callers against identification (issue 21): what a same-user client controls (its own root directory in a
user namespace, the processes that hold its connection, the pid it leaves behind) must neither stall the agent nor
pass for an allowed program. Real clients, real namespaces (`unshare -Urm`), the real agent, keyring and server."""
import json
import os
import shutil
import subprocess
import time

import pytest

from conftest import wait_for

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


def test_a_chrooted_client_with_a_fifo_for_flatpak_info_stalls_nobody(signed_in_agent, tmp_path):
    """Defect 1: the agent reads `/.flatpak-info` in the caller's root. A client in its own user namespace with a
    FIFO (or a symlink to one) there must not freeze the agent: while such clients wait connected, `authctl token`
    and `ping` are answered within 2 s. A regular file in the same set-up is read (the path is exercised: the
    audit names the app it declares)."""
    agent = signed_in_agent
    token = agent.token("work")

    control = chrooted_client(agent, tmp_path, "regular")
    out, err = control.communicate(timeout=30)
    if control.returncode != 0 and "connected" not in out:
        pytest.skip(f"cannot make a user namespace with a tmpfs here: {err.strip()[-300:]}")
    reply = json.loads(out.splitlines()[-1])
    assert reply["result"]["access_token"] == token, reply
    assert audit(agent)[-1]["caller"].get("flatpak_app") == "org.example.Chrooted", \
        "the agent did not read the chrooted client's /.flatpak-info: this test would not exercise that read"

    # As many as there can be accept loops (SocketServer.acceptThreads): each could hold one.
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
            assert elapsed < 2, f"authctl token took {elapsed:.1f} s while hostile clients were connected"
            started = time.monotonic()
            with agent.connect(timeout=2) as s:
                s.sendall(b'{"v":1,"id":9,"op":"ping"}\n')
                assert b'"protocol"' in s.recv(65536)
            assert time.monotonic() - started < 2
        # The hostile clients themselves are answered too (as an open account serves anyone), not left hanging.
        for proc in hostile:
            out, _ = proc.communicate(timeout=10)
            assert json.loads(out.splitlines()[-1])["result"]["access_token"] == token
    finally:
        for proc in hostile:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
    agent.remember(token)
