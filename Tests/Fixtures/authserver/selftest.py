#!/usr/bin/env python
"""End-to-end self-test of the fixture: selftest.py [STATE_DIR]

Uses the server in STATE_DIR if STATE_DIR/ready exists, else starts serve.py in a
temporary STATE_DIR (and stops it afterwards). Run with the venv python.
Exits non-zero on the first failure.
"""
import base64
import json
import hashlib
import http.server
import os
import secrets
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlsplit

import requests
from jwcrypto import jwk, jwt

HERE = Path(__file__).resolve().parent
BROWSER = HERE.parent / "browser" / "fake-browser"
CLIENT = "auth-agent-test"


def redact(text):
    """Token responses never reach test output: keep only the field names and non-secret values."""
    try:
        body = json.loads(text)
    except ValueError:
        return text[:100]
    if not isinstance(body, dict):
        return "non-object JSON"
    secret = {"access_token", "refresh_token", "id_token", "device_code"}
    return json.dumps({k: ("<redacted>" if k in secret else v) for k, v in body.items()})


def check(cond, what):
    if not cond:
        sys.exit(f"selftest FAILED: {what}")
    print(f"ok  {what}")


class Listener(http.server.ThreadingHTTPServer):
    """Loopback redirect listener: accepts /oauth2/callback/work with the expected state."""

    def __init__(self, expected_state):
        self.expected_state, self.result, self.hits = expected_state, threading.Event(), []
        self.code = self.error = None
        super().__init__(("127.0.0.1", 0), Handler)


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        srv, url = self.server, urlsplit(self.path)
        q = {k: v[0] for k, v in parse_qs(url.query).items()}
        ok = url.path == "/oauth2/callback/work" and q.get("state") == srv.expected_state
        srv.hits.append((url.path, ok))
        if ok:
            srv.code, srv.error = q.get("code"), q.get("error")
            srv.result.set()
        self.send_response(200 if ok else 400)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *a):
        pass


def browse(url, mode="login"):
    env = dict(os.environ, FAKE_BROWSER_PYTHON=sys.executable, FAKE_BROWSER_MODE=mode)
    return subprocess.run([str(BROWSER), url], env=env, timeout=60, capture_output=True, text=True)


def authorize(base, mode="login", client=CLIENT):
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    state, nonce = secrets.token_urlsafe(16), secrets.token_urlsafe(16)
    lst = Listener(state)
    lst.nonce = nonce
    threading.Thread(target=lst.serve_forever, daemon=True).start()
    redirect_uri = f"http://127.0.0.1:{lst.server_address[1]}/oauth2/callback/work"
    url = f"{base}/o/authorize/?" + urlencode({
        "response_type": "code", "client_id": client, "redirect_uri": redirect_uri,
        "scope": "openid email offline_access", "state": state, "nonce": nonce,
        "code_challenge": challenge, "code_challenge_method": "S256"})
    p = browse(url, mode)
    lst.shutdown()
    check(p.returncode == 0, f"fake-browser mode={mode} exits 0 ({p.stderr.strip()})")
    check(lst.result.is_set(), f"listener got callback with correct state (mode={mode})")
    return lst, verifier, redirect_uri


DEVICE_CLIENT = "auth-agent-test-device"
DEVICE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"


def csrf(html):
    import re
    m = re.search(r'name="csrfmiddlewaretoken"\s+value="([^"]+)"', html)
    check(m is not None, "page has a csrf token")
    return m.group(1)


def approve_device(base, user_code, action):
    """The person's side of RFC 8628 §3.3: log in, enter the user code, accept or deny."""
    b = requests.Session()
    b.trust_env = False
    login = f"{base}/accounts/login/"
    r = b.post(login, timeout=30, headers={"Referer": login}, data={
        "csrfmiddlewaretoken": csrf(b.get(login, timeout=30).text), "username": "alice",
        "password": "correct-horse-battery", "next": "/o/device/"})
    check(r.status_code == 200 and r.url.endswith("/o/device/"), f"device: logged in ({r.status_code})")
    r = b.post(r.url, timeout=30, headers={"Referer": r.url},
               data={"csrfmiddlewaretoken": csrf(r.text), "user_code": user_code})
    check(r.status_code == 200 and "/o/device-confirm/" in r.url, f"device: user code accepted ({r.status_code})")
    r = b.post(r.url, timeout=30, headers={"Referer": r.url},
               data={"csrfmiddlewaretoken": csrf(r.text), "action": action})
    check(r.status_code == 200, f"device: {action} ({r.status_code})")


def device_grant(s, base, token_url):
    def start():
        r = s.post(f"{base}/o/device-authorization/", timeout=30,
                   data={"client_id": DEVICE_CLIENT, "scope": "openid email offline_access"})
        check(r.status_code == 200, f"device authorization 200 ({r.status_code} {redact(r.text)[:200]})")
        d = r.json()
        check(d["verification_uri"] == f"{base}/o/device/" and d["interval"] >= 1 and d["expires_in"] > 0
              and d["user_code"], f"device authorization: verification_uri, interval={d['interval']}, user_code")
        return d

    def poll(d):
        return s.post(token_url, timeout=30, data={
            "grant_type": DEVICE_GRANT, "device_code": d["device_code"], "client_id": DEVICE_CLIENT})

    d = start()
    r = poll(d)
    check(r.status_code == 400 and r.json().get("error") == "authorization_pending",
          f"device poll before approval -> authorization_pending ({r.status_code} {r.text[:100]})")
    approve_device(base, d["user_code"], "accept")
    r = poll(d)
    # No id_token: oauthlib's device grant is plain OAuth 2.0, even with the openid scope.
    check(r.status_code == 200 and all(k in r.json() for k in ("access_token", "refresh_token")),
          f"device poll after approval -> access + refresh token ({r.status_code} {redact(r.text)[:200]})")
    r = poll(d)
    check(r.status_code == 400 and r.json().get("error") == "expired_token",
          f"device_code is single use: replay -> expired_token ({r.status_code} {redact(r.text)[:100]})")
    d = start()
    approve_device(base, d["user_code"], "deny")
    r = poll(d)
    check(r.status_code == 400 and r.json().get("error") == "access_denied",
          f"device poll after deny -> access_denied ({r.status_code} {r.text[:100]})")


def main():
    state_dir = Path(sys.argv[1]) if len(sys.argv) > 1 else None
    proc = None
    if state_dir is None or not (state_dir / "ready").exists():
        state_dir = state_dir or Path(tempfile.mkdtemp(prefix="as-selftest-"))
        t0 = time.monotonic()
        proc = subprocess.Popen([sys.executable, str(HERE / "serve.py"), str(state_dir)])
        while not (state_dir / "ready").exists():
            if proc.poll() is not None or time.monotonic() - t0 > 60:
                sys.exit("selftest FAILED: server did not start")
            time.sleep(0.02)
        print(f"server ready in {time.monotonic() - t0:.2f}s (state {state_dir})")
    import selftest_dpop
    others = selftest_dpop.start_servers(state_dir)  # they boot while the main checks run
    try:
        run(state_dir)
        t0 = time.monotonic()
        selftest_dpop.run_all(state_dir, *others)
        print(f"DPoP/PAR checks took {time.monotonic() - t0:.2f}s")
    finally:
        for srv in others:
            srv.stop()
        if proc:
            proc.terminate()
            proc.wait()


def run(state_dir):
    base = "http://127.0.0.1:" + (state_dir / "port").read_text().strip()
    issuer = (state_dir / "issuer").read_text().strip()
    s = requests.Session()
    s.trust_env = False
    disco = s.get(f"{issuer}/.well-known/openid-configuration", timeout=30).json()
    check(disco["issuer"] == issuer == f"{base}/o", "discovery issuer matches STATE_DIR/issuer")
    token_url = disco["token_endpoint"]

    lst, verifier, redirect_uri = authorize(base)
    check(lst.code and [h[1] for h in lst.hits] == [True], "code received by listener")
    r = s.post(token_url, timeout=30, data={
        "grant_type": "authorization_code", "code": lst.code, "redirect_uri": redirect_uri,
        "client_id": CLIENT, "code_verifier": verifier})
    check(r.status_code == 200, f"code exchange 200 ({r.status_code} {redact(r.text)})")
    tok = r.json()
    check(all(k in tok for k in ("access_token", "refresh_token", "id_token", "expires_in")),
          f"token response has access/refresh/id token + expires_in (token_type={tok.get('token_type')!r}, "
          f"expires_in={tok.get('expires_in')}, scope={tok.get('scope')!r})")

    jwks = jwk.JWKSet.from_json(s.get(disco["jwks_uri"], timeout=30).text)
    claims = json.loads(jwt.JWT(jwt=tok["id_token"], key=jwks, algs=["RS256"]).claims)
    check(claims["iss"] == issuer and claims["aud"] == CLIENT and claims["nonce"] == lst.nonce
          and claims["email"] == "alice@example.test", f"id_token RS256 signature + iss/aud/nonce/email ok")

    def refresh(rt):
        return s.post(token_url, timeout=30, data={
            "grant_type": "refresh_token", "refresh_token": rt, "client_id": CLIENT})

    r = refresh(tok["refresh_token"])
    check(r.status_code == 200, f"refresh 200 ({r.status_code} {redact(r.text)})")
    tok2 = r.json()
    check(tok2["refresh_token"] != tok["refresh_token"], "refresh token rotated")
    r = refresh(tok["refresh_token"])
    check(r.status_code == 400 and r.json().get("error") == "invalid_grant",
          f"old refresh token -> invalid_grant ({r.status_code} {r.text[:100]})")

    r = s.post(f"{base}/o/introspect/", data={"token": tok2["access_token"]},
               auth=("introspector", "introspector-secret"), timeout=30)
    check(r.status_code == 200 and r.json().get("active") is True, f"introspection active=true ({redact(r.text)})")

    r = s.post(f"{base}/o/revoke_token/", timeout=30, data={
        "token": tok2["refresh_token"], "token_type_hint": "refresh_token", "client_id": CLIENT})
    check(r.status_code == 200, f"revoke refresh token 200 ({r.status_code})")
    r = refresh(tok2["refresh_token"])
    check(r.status_code == 400 and r.json().get("error") == "invalid_grant",
          f"revoked refresh token -> invalid_grant ({r.status_code} {r.text[:100]})")

    # Fake-browser modes.
    lst, _, _ = authorize(base, "wrong-state")
    check([h[1] for h in lst.hits] == [False, True], "wrong-state: first rejected, second accepted")
    lst, _, _ = authorize(base, "deny")
    check(lst.error == "access_denied" and lst.code is None, "deny: listener got error=access_denied")
    check(browse("http://127.0.0.1:9/", "none").returncode == 0, "mode none exits 0")
    check(browse("http://127.0.0.1:9/", "fail").returncode == 1, "mode fail exits 1")

    # Confidential client, client_secret_basic.
    lst, verifier, redirect_uri = authorize(base, client="auth-agent-test-confidential")
    r = s.post(token_url, timeout=30, auth=("auth-agent-test-confidential", "confidential-secret"), data={
        "grant_type": "authorization_code", "code": lst.code, "redirect_uri": redirect_uri,
        "code_verifier": verifier})
    check(r.status_code == 200 and "refresh_token" in r.json(), f"confidential client_secret_basic exchange ({r.status_code})")

    device_grant(s, base, token_url)

    n = sum(1 for line in (state_dir / "requests.log").read_text().splitlines() if line.startswith("POST /o/token/ "))
    check(n >= 5, f"requests.log has {n} 'POST /o/token/' lines")


if __name__ == "__main__":
    main()
    print("selftest passed")
