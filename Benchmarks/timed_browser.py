"""Runs Tests/Fixtures/browser/fake_browser.py unchanged, except for the last step: the callback to the agent's
loopback listener is sent over a plain socket, and the moment just before it connects is recorded
(time.monotonic_ns, i.e. CLOCK_MONOTONIC) in $BENCH_CALLBACK_T0_FILE.

The fake browser's own HTTP library spends about a millisecond of Python building a request before any byte leaves;
that is the browser's time, not the agent's, so the timed callback is a fixed GET written out by hand. The status
line it gets back is checked like the library's would be.

A real browser stays open on the "signed in" page. This one, too, stays alive (asleep) for a second after the callback
instead of tearing its interpreter down at once, which would take CPU from the agent and the authorization server on
a 2-core machine in the very milliseconds being measured."""
import atexit
import os
import socket
import sys
import time
from urllib.parse import urlsplit

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "Tests", "Fixtures", "browser"))
import fake_browser  # noqa: E402

_deliver = fake_browser.deliver
LINGER_S = 1.0


def timed_deliver(b, url, note=""):
    path = os.environ.get("BENCH_CALLBACK_T0_FILE")
    u = urlsplit(url)
    if not path or fake_browser.is_private_use(url) or u.scheme != "http":
        return _deliver(b, url, note)
    target = u.path + ("?" + u.query if u.query else "")
    request = (f"GET {target} HTTP/1.1\r\nHost: {u.netloc}\r\nUser-Agent: fake-browser/1\r\nAccept: */*\r\n"
               "Connection: close\r\n\r\n").encode()
    host = u.hostname
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    t0 = time.monotonic_ns()
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.settimeout(fake_browser.TIMEOUT)
        s.connect((host, u.port))
        s.sendall(request)
        reply = b""
        while chunk := s.recv(65536):
            reply += chunk
    with open(path, "a", encoding="utf-8") as f:
        f.write(f"{t0}\n")
    try:
        status = int(reply.split(b" ", 2)[1])
    except (IndexError, ValueError):
        fake_browser.fail(f"GET {u.netloc}{u.path}: no HTTP status line in the reply")
    fake_browser.log(f"GET {u.path} -> {status}{note} (timed)")
    atexit.register(time.sleep, LINGER_S)
    return status


fake_browser.deliver = timed_deliver

if __name__ == "__main__":
    fake_browser.main()
