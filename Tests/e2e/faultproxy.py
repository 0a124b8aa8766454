"""A small fault-injecting HTTP proxy for the end-to-end tests: it sits between the agent and the auth server (the
account's `token_endpoint` points at it) and, per request, forwards, hangs before or after forwarding, or answers
with a canned response. Used by test_hostile.py.

Modes (FaultProxy.set):
  pass           forward to the upstream server and relay its answer
  hang_before    signal `reached`, then hold the request without forwarding until `release` (then drop it)
  hold           signal `reached`, hold the request until `release`, then forward it and relay the answer
  hang_after     forward (the server acts on it, e.g. rotates the refresh token), signal `reached`, hold the
                 answer until `release`, then drop the connection without replying
  after_response forward, relay the answer, then signal `reached`
  hold_response  forward (the server acts on it), signal `reached`, hold the answer until `release`, then relay it
  canned         answer (status, content_type, body[, [(header, value), ...]]) without contacting the server
  drop           close the connection at once without an answer (the server is unreachable: a reset, no reply)
  drip           answer 200 with a Content-Length of 4096 and then one byte every 0.5 s (a body that never ends in
                 time: only an overall deadline stops it, never an idle read timeout)
A rewrite (FaultProxy.rewrite) changes the upstream's answer body for paths starting with a prefix (e.g. a forged
ID token in a real token response).
A quirk (FaultProxy.quirk, see quirkproxy.py) replaces `pass` with a function that sees the request and may
forward it, change the answer or answer by itself: one provider's documented behaviour.
An armed mode (FaultProxy.arm) takes effect with the next request to a path starting with a prefix, that request
included: a fault that begins the moment a client next asks (e.g. as the agent starts a refresh).
A script (FaultProxy.script) takes precedence over the mode: canned answers for paths starting with a prefix, used
once each in order (e.g. a `slow_down` before the real token endpoint answers).
Forwarding is what a reverse proxy in front of an authorization server does: the request keeps its Host header (so
the server sees the URL the client called, the proxy's: a DPoP proof's `htu` names it, RFC 9449 §4.3), its
`DPoP` proof and its content headers; the answer keeps its content headers and `DPoP-Nonce` (RFC 9449 §8).
Every request is counted in `hits` (method + path) and timed in `times` (time.monotonic(), method + path); a
request forwarded to the upstream also gets its arrival time and the upstream's status in `forwarded` (time, method
+ path, status).
The parameters of every form POST are kept in `forms` (path, {name: value}), with the values of secret parameters
(tokens, codes, verifiers, client secrets) replaced by "<secret>".
"""
from __future__ import annotations

import http.client
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl, urlsplit

SECRET_FIELDS = {"refresh_token", "code", "code_verifier", "client_secret", "device_code", "token"}
FORWARDED_HEADERS = ("Host", "Content-Type", "Accept", "Authorization", "User-Agent", "DPoP")
RELAYED_HEADERS = ("content-type", "cache-control", "pragma", "dpop-nonce")
HOLD_LIMIT = 60  # seconds a hung request is held at most (so a forgotten release cannot wedge the test run)


class FaultProxy:
    def __init__(self, upstream_base: str):
        self.upstream = urlsplit(upstream_base)
        self.mode = "pass"
        self.canned: tuple[int, str, bytes] | None = None
        self.reached = threading.Event()
        self.release = threading.Event()
        self.hits: list[str] = []
        self.times: list[tuple[float, str]] = []
        self.forwarded: list[tuple[float, str, int]] = []
        self.forms: list[tuple[str, dict[str, str]]] = []
        self.scripts: dict[str, list[tuple[int, str, bytes]]] = {}
        self.rewrites: dict[str, object] = {}
        self.quirk_fn = None
        self.armed: tuple[str, str, tuple | None] | None = None  # (prefix, mode, canned), see arm()
        self.fired = threading.Event()
        self.fired_at: float | None = None
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet: request lines carry no secrets, but keep pytest output small
                pass

            def _handle(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                arrived = time.monotonic()
                with proxy._lock:
                    proxy.hits.append(f"{self.command} {self.path}")
                    proxy.times.append((arrived, f"{self.command} {self.path}"))
                    if proxy.armed is not None and self.path.startswith(proxy.armed[0]):
                        _, proxy.mode, proxy.canned = proxy.armed
                        proxy.armed, proxy.fired_at = None, arrived
                        proxy.fired.set()
                    if self.command == "POST":
                        fields = dict(parse_qsl(body.decode(errors="replace"), keep_blank_values=True))
                        proxy.forms.append((self.path, {k: ("<secret>" if k in SECRET_FIELDS else v)
                                                        for k, v in fields.items()}))
                    mode, canned = proxy.mode, proxy.canned
                    for prefix, queue in proxy.scripts.items():
                        if self.path.startswith(prefix) and queue:
                            mode, canned = "canned", queue.pop(0)
                            break
                if mode == "canned":
                    status, ctype, payload, *extra = canned
                    return self._reply(status, [("Content-Type", ctype)] + (extra[0] if extra else []), payload)
                if mode == "drip":
                    return self._drip()
                if mode == "drop":
                    self.close_connection = True
                    return
                if mode == "hold":
                    proxy.reached.set()
                    proxy.release.wait(HOLD_LIMIT)
                    return self._reply(*proxy._forward(self.command, self.path, self.headers, body))
                if mode == "hang_before":
                    proxy.reached.set()
                    proxy.release.wait(HOLD_LIMIT)
                    self.close_connection = True
                    return
                if mode == "pass" and proxy.quirk_fn is not None:
                    forward = lambda fwd_body=body: proxy._forward(self.command, self.path, self.headers, fwd_body)
                    return self._reply(*proxy.quirk_fn(self.command, self.path, self.headers, body, forward))
                status, headers, payload = proxy._forward(self.command, self.path, self.headers, body)
                with proxy._lock:
                    proxy.forwarded.append((arrived, f"{self.command} {self.path}", status))
                    rewrite = next((fn for prefix, fn in proxy.rewrites.items() if self.path.startswith(prefix)), None)
                if rewrite is not None:
                    payload = rewrite(payload)
                if mode == "hang_after":
                    proxy.reached.set()
                    proxy.release.wait(HOLD_LIMIT)
                    self.close_connection = True
                    return
                if mode == "hold_response":
                    proxy.reached.set()
                    proxy.release.wait(HOLD_LIMIT)
                self._reply(status, headers, payload)
                if mode == "after_response":
                    proxy.reached.set()

            def _drip(self):
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", "4096")
                    self.end_headers()
                    self.wfile.flush()
                    for _ in range(4096):
                        if proxy.release.wait(0.5):
                            break
                        self.wfile.write(b" ")
                        self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    pass
                self.close_connection = True

            def _reply(self, status, headers, payload):
                try:
                    self.send_response(status)
                    for key, value in headers:
                        self.send_header(key, value)
                    self.send_header("Content-Length", str(len(payload)))
                    self.send_header("Connection", "close")
                    self.end_headers()
                    self.wfile.write(payload)
                    self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    pass
                self.close_connection = True

            do_GET = do_POST = _handle

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def _forward(self, method, path, headers, body):
        conn = http.client.HTTPConnection(self.upstream.hostname, self.upstream.port, timeout=30)
        try:
            fwd = {k: headers[k] for k in FORWARDED_HEADERS if headers.get(k)}
            conn.request(method, path, body=body, headers=fwd)
            r = conn.getresponse()
            payload = r.read()
            keep = [(k, v) for k, v in r.getheaders() if k.lower() in RELAYED_HEADERS]
            return r.status, keep, payload
        finally:
            conn.close()

    def set(self, mode: str, canned: tuple[int, str, bytes] | None = None):
        with self._lock:
            self.release.set()  # let go of anything still held from the previous mode
            self.mode, self.canned = mode, canned
            self.armed = None
            self.reached = threading.Event()
            self.release = threading.Event()

    def arm(self, mode: str, canned: tuple[int, str, bytes] | None = None, prefix: str = "/"):
        """set(mode, canned) from the next request whose path starts with `prefix` on, that request included; until
        then requests are answered as now. `fired` is set then, `fired_at` is its arrival (time.monotonic())."""
        with self._lock:
            self.armed = (prefix, mode, canned)
            self.fired = threading.Event()
            self.fired_at = None

    def script(self, prefix: str, answers: list[tuple[int, str, bytes]]):
        """Answers the next len(answers) requests whose path starts with `prefix` with these, in order."""
        with self._lock:
            self.scripts[prefix] = list(answers)

    def rewrite(self, prefix: str, fn):
        """Passes the upstream's answer body for paths starting with `prefix` through fn(bytes) -> bytes."""
        with self._lock:
            self.rewrites[prefix] = fn

    def quirk(self, fn):
        """Answers every request in `pass` mode with fn(method, path, headers, body, forward) -> (status, headers,
        payload), where forward(body=the request's) relays to the upstream and returns the same triple."""
        with self._lock:
            self.quirk_fn = fn

    def times_of(self, prefix: str) -> list[float]:
        """When each POST to a path starting with `prefix` arrived (time.monotonic())."""
        with self._lock:
            return [t for t, hit in self.times if hit.startswith(f"POST {prefix}")]

    def token_posts(self) -> int:
        with self._lock:
            return sum(1 for h in self.hits if h.startswith("POST /o/token/"))

    def start(self):
        self.thread.start()
        return self

    def stop(self):
        self.release.set()
        self.server.shutdown()
        self.server.server_close()
