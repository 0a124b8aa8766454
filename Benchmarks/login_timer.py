"""Login overhead probe for scripts/bench: sends one `login` request over the agent's socket and prints one JSON
line with the time from the browser delivering the callback (read from $BENCH_CALLBACK_T0_FILE, written by
Benchmarks/timed-browser) to the final `login` reply reaching this client, i.e. the token being usable.

    python login_timer.py SOCKET ACCOUNT
"""
import json
import os
import socket
import sys
import time

sock_path, account = sys.argv[1], sys.argv[2]
t0_file = os.environ["BENCH_CALLBACK_T0_FILE"]
open(t0_file, "w").close()
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(60)
s.connect(sock_path)
s.sendall((json.dumps({"v": 1, "id": 1, "op": "login", "account": account}) + "\n").encode())
buf = b""
while True:
    chunk = s.recv(65536)
    if not chunk:
        sys.exit("login_timer: the agent closed the connection")
    buf += chunk
    done = None
    while b"\n" in buf:
        line, buf = buf.split(b"\n", 1)
        msg = json.loads(line)
        if "result" in msg or "error" in msg:
            done = msg
            break
    if done is not None:
        break
t1 = time.monotonic_ns()
if "error" in done:
    sys.exit(f"login_timer: login failed: {done['error'].get('code')}")
with open(t0_file) as f:
    stamps = [int(x) for x in f.read().split()]
if not stamps:
    sys.exit("login_timer: the browser recorded no callback time")
print(json.dumps({"account": account, "callback_to_usable_us": (t1 - stamps[-1]) / 1000.0}))
