"""Prints the request line a client sends, as it sent it: listens on a Unix socket, runs the client against it
(`record_request.py SOCKET -- COMMAND...`, the command pointed at SOCKET), keeps the first line of the first
connection and closes it unanswered. The client then fails, which is expected; its exit status is ignored. Used by
Benchmarks/session.sh so the load is the bytes `authctl` writes, not a hand-written line."""
import os
import socket
import subprocess
import sys

path, dash, command = sys.argv[1], sys.argv[2], sys.argv[3:]
assert dash == "--" and command, "usage: record_request.py SOCKET -- COMMAND..."
if os.path.exists(path):
    os.unlink(path)
with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
    listener.bind(path)
    listener.listen(1)
    listener.settimeout(30)
    client = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        connection, _ = listener.accept()
        with connection:
            connection.settimeout(30)
            line = b""
            while b"\n" not in line:
                chunk = connection.recv(4096)
                if not chunk:
                    break
                line += chunk
    finally:
        client.wait(timeout=30)
os.unlink(path)
if b"\n" not in line:
    sys.exit(f"record_request: {command[0]} sent no complete line")
sys.stdout.write(line.split(b"\n", 1)[0].decode())
