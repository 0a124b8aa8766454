"""DPoP (RFC 9449) and PAR (RFC 9126) self-test of the fixture, called by selftest.py.

Every check is a pair where it can be: what a correct client sends is accepted, and the same request with one
step skipped or faked is refused with the documented error. Real keys (jwcrypto, P-256 unless said otherwise).
Three servers: the default one selftest.py runs (AS_DPOP=optional, AS_PAR=on), a strict one (AS_DPOP=required,
nonces at the token, PAR and resource endpoints, AS_PAR=required, AS_PAR_EXPIRES=3) and a Google-like one
(AS_DPOP_BIND=refresh, AS_PAR_DPOP_HEADER=refuse), the last two started in parallel by start_servers().
"""
import base64
import hashlib
import http.client
import json
import os
import re
import secrets
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlsplit

import requests
from jwcrypto import jwk, jws

HERE = Path(__file__).resolve().parent
CLIENT = "auth-agent-test"
REDIRECT = "http://127.0.0.1:45678/oauth2/callback/work"  # never listened on: redirects are read, not followed
STRICT_ENV = {"AS_DPOP": "required", "AS_DPOP_NONCE": "1", "AS_DPOP_NONCE_KEEP": "2", "AS_RS_NONCE": "1",
              "AS_PAR": "required", "AS_PAR_EXPIRES": "3"}
GOOGLE_ENV = {"AS_DPOP_BIND": "refresh", "AS_PAR_DPOP_HEADER": "refuse"}
SECRETS = []  # every token value seen: none may appear in the server's logs


def check(cond, what):
    if not cond:
        sys.exit(f"selftest FAILED: {what}")
    print(f"ok  {what}")


def b64u(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class Key:
    def __init__(self, kty="EC", pem=None):
        if kty == "EC":
            self.k, self.alg = jwk.JWK.generate(kty="EC", crv="P-256"), "ES256"
        elif kty == "RSA":  # a PEM file: generating a 2048-bit key costs a noticeable part of a second
            self.k, self.alg = jwk.JWK.from_pem(Path(pem).read_bytes()), "PS256"
        else:
            self.k, self.alg = jwk.JWK.generate(kty="OKP", crv="Ed25519"), "EdDSA"
        self.jkt = self.k.thumbprint()

    def proof(self, htm, htu, *, nonce=None, token=None, iat=None, jti=None, typ="dpop+jwt", alg=None,
              header_jwk=None, claims=None, drop=()):
        c = {"jti": jti or secrets.token_urlsafe(12), "htm": htm, "htu": htu, "iat": int(time.time()) if iat is None else iat}
        if nonce is not None:
            c["nonce"] = nonce
        if token is not None:
            c["ath"] = b64u(hashlib.sha256(token.encode()).digest())
        c.update(claims or {})
        for name in drop:
            c.pop(name, None)
        header = {"typ": typ, "alg": alg or self.alg,
                  "jwk": header_jwk if header_jwk is not None else json.loads(self.k.export_public())}
        s = jws.JWS(json.dumps(c))
        if alg and alg.startswith("HS"):  # a symmetric MAC under the public key's header
            s.allowed_algs = [alg]
            s.add_signature(jwk.JWK.generate(kty="oct", size=256), alg=alg, protected=json.dumps(header))
        else:
            s.add_signature(self.k, alg=self.alg, protected=json.dumps(header))
        return s.serialize(compact=True)


class Server:
    def __init__(self, env, name, template=None):
        self.state = Path(tempfile.mkdtemp(prefix=f"as-selftest-{name}-"))
        if template is not None:
            # A copy of a migrated DB (and the RSA key) saves the migrations: seconds on a loaded machine.
            with sqlite3.connect(template / "db.sqlite3") as src, sqlite3.connect(self.state / "db.sqlite3") as dst:
                src.backup(dst)
            shutil.copy(template / "oidc-rsa.pem", self.state / "oidc-rsa.pem")
        self.env = dict(os.environ, **env)
        self.proc = subprocess.Popen([sys.executable, str(HERE / "serve.py"), str(self.state)],
                                     env=self.env, stderr=open(self.state / "serve.stderr", "wb"))

    def wait(self):
        t0 = time.monotonic()
        while not (self.state / "ready").exists():
            if self.proc.poll() is not None or time.monotonic() - t0 > 60:
                sys.exit(f"selftest FAILED: server did not start: {(self.state / 'serve.stderr').read_text()[-1500:]}")
            time.sleep(0.02)
        self.base = "http://127.0.0.1:" + (self.state / "port").read_text().strip()
        return self

    def restart(self):
        """Stops the server and starts it again on the same port and state dir; wait() for it."""
        port = (self.state / "port").read_text().strip()
        self.stop()
        self.proc = subprocess.Popen([sys.executable, str(HERE / "serve.py"), str(self.state), port],
                                     env=self.env, stderr=open(self.state / "serve.stderr", "ab"))

    def stop(self):
        self.proc.terminate()
        self.proc.wait()


def start_servers(template):
    """The strict and the Google-like servers, started at once so that they boot while the main run goes on, each
    from a copy of the main server's DB (template: its state dir)."""
    return Server(STRICT_ENV, "strict", template), Server(GOOGLE_ENV, "google", template)


class AS:
    """A client of one server: logged-in browser session (for /o/authorize/) and a plain one (back channel)."""

    def __init__(self, base):
        self.base, self.token_url, self.par_url = base, base + "/o/token/", base + "/o/par/"
        self.resource = base + "/api/resource"
        self.s = requests.Session()
        self.s.trust_env = False
        self.browser = requests.Session()
        self.browser.trust_env = False
        login = base + "/accounts/login/"
        html = self.browser.get(login, timeout=30).text
        csrf = re.search(r'name="csrfmiddlewaretoken"\s+value="([^"]+)"', html).group(1)
        r = self.browser.post(login, timeout=30, allow_redirects=False, headers={"Referer": login}, data={
            "csrfmiddlewaretoken": csrf, "username": "alice", "password": "correct-horse-battery"})
        check(r.status_code == 302, f"browser session logged in at {base}")

    def pkce(self):
        verifier = secrets.token_urlsafe(48)
        return verifier, b64u(hashlib.sha256(verifier.encode()).digest())

    def auth_params(self, client=CLIENT, **extra):
        verifier, challenge = self.pkce()
        p = {"response_type": "code", "client_id": client, "redirect_uri": REDIRECT, "state": secrets.token_urlsafe(8),
             "scope": "openid offline_access read", "code_challenge": challenge, "code_challenge_method": "S256"}
        p.update(extra)
        return verifier, p

    def authorize(self, query):
        """GET /o/authorize/?query in the logged-in session; returns (status, callback query dict or None)."""
        r = self.browser.get(self.base + "/o/authorize/?" + urlencode(query), timeout=30, allow_redirects=False)
        loc = r.headers.get("Location", "")
        if r.status_code == 302 and loc.startswith(REDIRECT):
            return r.status_code, {k: v[0] for k, v in parse_qs(urlsplit(loc).query).items()}
        return r.status_code, None

    def code(self, client=CLIENT, **extra):
        verifier, p = self.auth_params(client, **extra)
        status, cb = self.authorize(p)
        check(status == 302 and cb and "code" in cb, f"authorization code issued ({status})")
        return cb["code"], verifier

    def token(self, data, proof=None, auth=None, headers=None):
        h = dict(headers or {})
        if proof:
            h["DPoP"] = proof
        r = self.s.post(self.token_url, data=data, headers=h, auth=auth, timeout=30)
        if r.status_code == 200:
            body = r.json()
            SECRETS.extend(body[k] for k in ("access_token", "refresh_token", "id_token") if k in body)
        return r

    def exchange(self, code, verifier, proof=None, client=CLIENT, auth=None):
        return self.token({"grant_type": "authorization_code", "code": code, "redirect_uri": REDIRECT,
                           "client_id": client, "code_verifier": verifier}, proof, auth)

    def refresh(self, rt, proof=None, client=CLIENT):
        return self.token({"grant_type": "refresh_token", "refresh_token": rt, "client_id": client}, proof)

    def introspect(self, token):
        return self.s.post(self.base + "/o/introspect/", data={"token": token},
                           auth=("introspector", "introspector-secret"), timeout=30).json()

    def get_resource(self, scheme, token, proof=None, method="GET"):
        h = {"Authorization": f"{scheme} {token}"}
        if proof:
            h["DPoP"] = proof
        return self.s.request(method, self.resource, headers=h, timeout=30)

    def push(self, data, proof=None, auth=None):
        return self.s.post(self.par_url, data=data, headers={"DPoP": proof} if proof else {}, auth=auth, timeout=30)

    def metadata(self):
        a = self.s.get(self.base + "/o/.well-known/openid-configuration", timeout=30).json()
        b = self.s.get(self.base + "/.well-known/oauth-authorization-server/o", timeout=30).json()
        return a, b


def err(r):
    try:
        return r.status_code, r.json().get("error"), r.json().get("error_description")
    except ValueError:
        return r.status_code, None, r.text[:80]


def refused(r, error, what, status=400):
    code, e, desc = err(r)
    check(code == status and e == error, f"{what} -> {status} {error} ({code} {e}: {desc})")


def www_auth_error(r):
    m = re.search(r'error="([^"]+)"', r.headers.get("WWW-Authenticate", ""))
    return m.group(1) if m else None


def rs_refused(r, error, what):
    check(r.status_code == 401 and www_auth_error(r) == error and r.headers["WWW-Authenticate"].startswith("DPoP "),
          f"resource: {what} -> 401 DPoP error={error} ({r.status_code} {r.headers.get('WWW-Authenticate', '')[:90]})")


# ---------------------------------------------------------------------------------------------------------------

def run_default(base, state_dir):
    c = AS(base)
    key, other = Key(), Key()
    T = c.token_url

    a, b = c.metadata()
    for name, doc in (("discovery", a), ("RFC 8414", b)):
        check(doc.get("dpop_signing_alg_values_supported") == ["ES256", "RS256", "PS256", "EdDSA"]
              and doc.get("pushed_authorization_request_endpoint") == base + "/o/par/"
              and "require_pushed_authorization_requests" not in doc,
              f"{name} metadata advertises DPoP algs and the PAR endpoint")

    # dpop_jkt in a plain authorization request binds the code (RFC 9449 §10).
    code, verifier = c.code(dpop_jkt=key.jkt)
    refused(c.exchange(code, verifier), "invalid_dpop_proof", "code with dpop_jkt redeemed without a proof")
    refused(c.exchange(code, verifier, other.proof("POST", T)), "invalid_dpop_proof",
            "code with dpop_jkt redeemed with another key's proof")
    r = c.exchange(code, verifier, key.proof("POST", T))
    check(r.status_code == 200 and r.json()["token_type"] == "DPoP",
          f"code redeemed with the dpop_jkt key -> 200 token_type DPoP ({r.status_code} {err(r)[1:]})")
    tok = r.json()
    i = c.introspect(tok["access_token"])
    check(i.get("active") and i.get("cnf") == {"jkt": key.jkt} and i.get("token_type") == "DPoP",
          "introspection: cnf.jkt is the proof key's RFC 7638 thumbprint, token_type DPoP")

    # Each proof check at the token endpoint, on the bound refresh token (a refused request leaves it unused).
    rt = tok["refresh_token"]
    port = urlsplit(base).port
    cases = [
        ("wrong htu (other path)", key.proof("POST", base + "/o/revoke_token/")),
        ("wrong htu (no trailing slash)", key.proof("POST", base + "/o/token")),
        ("wrong htu (other port)", key.proof("POST", f"http://127.0.0.1:{port + 1}/o/token/")),
        ("wrong htu (https)", key.proof("POST", T.replace("http:", "https:"))),
        ("wrong htm", key.proof("GET", T)),
        ("iat 120 s old", key.proof("POST", T, iat=int(time.time()) - 120)),
        ("iat 60 s in the future", key.proof("POST", T, iat=int(time.time()) + 60)),
        ("typ JWT", key.proof("POST", T, typ="JWT")),
        ("no jti", key.proof("POST", T, drop=("jti",))),
        ("no iat", key.proof("POST", T, drop=("iat",))),
        ("jwk with the private key", key.proof("POST", T, header_jwk=json.loads(key.k.export_private()))),
        ("jwk of another key (signature does not verify)",
         key.proof("POST", T, header_jwk=json.loads(other.k.export_public()))),
        ("alg HS256", key.proof("POST", T, alg="HS256")),
        ("not a JWS", "not-a-proof"),
    ]
    good = key.proof("POST", T)
    tampered = good.split(".")
    tampered[1] = b64u(json.dumps({**json.loads(base64.urlsafe_b64decode(tampered[1] + "==")), "htu": T + "x"}).encode())
    cases.append(("payload changed after signing", ".".join(tampered)))
    for what, proof in cases:
        refused(c.refresh(rt, proof), "invalid_dpop_proof", f"token endpoint proof: {what}")
    # Two DPoP headers (RFC 9449 §4.3 step 1), sent as two header lines.
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    body = urlencode({"grant_type": "refresh_token", "refresh_token": rt, "client_id": CLIENT})
    conn.putrequest("POST", "/o/token/")
    conn.putheader("Content-Type", "application/x-www-form-urlencoded")
    conn.putheader("Content-Length", str(len(body)))
    conn.putheader("DPoP", key.proof("POST", T))
    conn.putheader("DPoP", key.proof("POST", T))
    conn.endheaders(body.encode())
    resp = conn.getresponse()
    body = json.loads(resp.read())
    check(resp.status == 400 and body.get("error") == "invalid_dpop_proof"
          and body.get("error_description") == "more than one DPoP header",
          f"token endpoint proof: two DPoP headers -> 400 invalid_dpop_proof, more than one DPoP header "
          f"({resp.status} {body.get('error_description')})")
    conn.close()
    refused(c.refresh(rt), "invalid_dpop_proof", "bound refresh token without a proof")
    refused(c.refresh(rt, other.proof("POST", T)), "invalid_dpop_proof", "bound refresh token with another key")
    # htu compared after RFC 3986 normalization, query ignored (RFC 9449 §4.3 step 9).
    proof = key.proof("POST", f"HTTP://127.0.0.1:{port}/o/./token/?q=1#f")
    r = c.refresh(rt, proof)
    check(r.status_code == 200 and r.json()["token_type"] == "DPoP",
          f"refresh with the bound key (htu differing only by case, dot segment, query, fragment) -> 200 DPoP "
          f"({r.status_code} {err(r)[1:]})")
    tok2 = r.json()
    check(c.introspect(tok2["access_token"]).get("cnf") == {"jkt": key.jkt}, "refreshed access token bound to the same key")
    refused(c.refresh(tok2["refresh_token"], proof), "invalid_dpop_proof", "token endpoint proof: replayed jti")
    for kty in ("RSA", "OKP"):
        k2 = Key(kty, pem=state_dir / "oidc-rsa.pem")
        code, verifier = c.code()
        r = c.exchange(code, verifier, k2.proof("POST", T))
        check(r.status_code == 200 and c.introspect(r.json()["access_token"]).get("cnf") == {"jkt": k2.jkt},
              f"{k2.alg} proof accepted, token bound to its thumbprint ({r.status_code})")

    # The protected resource (RFC 9449 §7).
    at, R = tok2["access_token"], c.resource
    r = c.get_resource("DPoP", at, key.proof("GET", R, token=at))
    check(r.status_code == 200 and r.json()["user"] == "alice" and r.json()["jkt"] == key.jkt,
          f"resource: DPoP token + proof -> 200 naming alice ({r.status_code} {r.text[:80]})")
    r = c.get_resource("DPoP", at, key.proof("POST", R, token=at), method="POST")
    check(r.status_code == 200, f"resource: POST with htm POST -> 200 ({r.status_code})")
    rs_refused(c.get_resource("Bearer", at), "invalid_token", "DPoP-bound token sent as Bearer")
    rs_refused(c.get_resource("Bearer", at, key.proof("GET", R, token=at)), "invalid_token",
               "DPoP-bound token sent as Bearer, with a proof")
    rs_refused(c.get_resource("DPoP", at), "invalid_dpop_proof", "no proof")
    rs_refused(c.get_resource("DPoP", at, key.proof("GET", R)), "invalid_dpop_proof", "no ath")
    rs_refused(c.get_resource("DPoP", at, key.proof("GET", R, token=tok["access_token"])), "invalid_dpop_proof",
               "ath of another token")
    rs_refused(c.get_resource("DPoP", at, key.proof("GET", base + "/api/other", token=at)), "invalid_dpop_proof",
               "wrong htu")
    rs_refused(c.get_resource("DPoP", at, key.proof("POST", R, token=at)), "invalid_dpop_proof", "wrong htm")
    rs_refused(c.get_resource("DPoP", at, other.proof("GET", R, token=at)), "invalid_dpop_proof", "another key")
    rs_refused(c.get_resource("DPoP", at, key.proof("GET", R, token=at, iat=int(time.time()) - 300)),
               "invalid_dpop_proof", "old iat")
    p = key.proof("GET", R, token=at)
    check(c.get_resource("DPoP", at, p).status_code == 200, "resource: fresh proof -> 200")
    rs_refused(c.get_resource("DPoP", at, p), "invalid_dpop_proof", "replayed jti")
    r = c.get_resource("Bearer", "no-such-token")
    check(r.status_code == 401 and www_auth_error(r) == "invalid_token", "resource: unknown token -> 401 invalid_token")

    # Without a proof (AS_DPOP=optional): Bearer tokens, accepted as Bearer only.
    code, verifier = c.code()
    r = c.exchange(code, verifier)
    check(r.status_code == 200 and r.json()["token_type"] == "Bearer", "no proof -> 200 token_type Bearer")
    bt = r.json()
    check("cnf" not in c.introspect(bt["access_token"]), "unbound token: no cnf in introspection")
    r = c.get_resource("Bearer", bt["access_token"])
    check(r.status_code == 200 and r.json()["token_type"] == "Bearer", "resource: unbound token as Bearer -> 200")
    rs_refused(c.get_resource("DPoP", bt["access_token"], key.proof("GET", R, token=bt["access_token"])),
               "invalid_token", "unbound token sent with the DPoP scheme")
    r = c.refresh(bt["refresh_token"])
    check(r.status_code == 200 and r.json()["token_type"] == "Bearer", "unbound refresh token, no proof -> 200 Bearer")

    # A confidential client's refresh token is not bound (RFC 9449 §5); its access token is.
    conf = ("auth-agent-test-confidential", "confidential-secret")
    code, verifier = c.code(client=conf[0])
    r = c.exchange(code, verifier, key.proof("POST", T), client=conf[0], auth=conf)
    check(r.status_code == 200 and r.json()["token_type"] == "DPoP", "confidential client: access token bound")
    r = c.token({"grant_type": "refresh_token", "refresh_token": r.json()["refresh_token"]}, auth=conf)
    check(r.status_code == 200, f"confidential client: refresh token not bound, refresh without a proof -> 200 "
                                f"({r.status_code})")

    run_par(c, key, other, state_dir)
    run_device(c, key)
    run_events(state_dir, key)


def run_par(c, key, other, state_dir):
    T = c.token_url
    verifier, p = c.auth_params(dpop_jkt=key.jkt, nonce="n-" + secrets.token_urlsafe(6))
    r = c.push(p)
    body = r.json()
    check(r.status_code == 201 and body["request_uri"].startswith("urn:ietf:params:oauth:request_uri:")
          and body["expires_in"] == 60 and r.headers.get("Cache-Control") == "no-store",
          f"PAR push (public client, dpop_jkt) -> 201 request_uri, expires_in 60 ({r.status_code})")
    uri = body["request_uri"]
    status, cb = c.authorize({"client_id": CLIENT, "request_uri": uri, "state": "browser-state",
                              "redirect_uri": "http://127.0.0.1:1/evil"})
    check(status == 302 and cb and cb.get("state") == p["state"] and "code" in cb,
          "authorize with client_id + request_uri: pushed parameters used, the browser's own ignored")
    status, _ = c.authorize({"client_id": CLIENT, "request_uri": uri})
    check(status == 400, f"request_uri is single use: second authorization -> 400 invalid_request_uri ({status})")
    refused(c.exchange(cb["code"], verifier, other.proof("POST", T)), "invalid_dpop_proof",
            "code of a push with dpop_jkt, redeemed with another key")
    r = c.exchange(cb["code"], verifier, key.proof("POST", T))
    check(r.status_code == 200 and r.json()["token_type"] == "DPoP", "code of the push redeemed with its key -> 200")

    _, p2 = c.auth_params()
    status, _ = c.authorize({"client_id": CLIENT, "request_uri": "urn:ietf:params:oauth:request_uri:nope"})
    check(status == 400, "unknown request_uri -> 400")
    uri2 = c.push(p2).json()["request_uri"]
    status, _ = c.authorize({"client_id": "auth-agent-test-consent", "request_uri": uri2})
    check(status == 400, "request_uri with another client's client_id -> 400")
    status, _ = c.authorize({"request_uri": uri2})
    check(status == 400, "request_uri without client_id -> 400")

    refused(c.push({**p2, "request_uri": uri2}), "invalid_request", "PAR push with a request_uri parameter")
    refused(c.push({**p2, "redirect_uri": "http://127.0.0.1/elsewhere"}), "invalid_request",
            "PAR push with an unregistered redirect_uri")
    refused(c.push({k: v for k, v in p2.items() if not k.startswith("code_challenge")}), "invalid_request",
            "PAR push without PKCE")
    refused(c.push({**p2, "code_challenge_method": "plain"}), "invalid_request", "PAR push with PKCE plain")
    refused(c.push({**p2, "scope": "openid nope"}), "invalid_scope", "PAR push with an unknown scope")
    refused(c.push({**p2, "client_id": "no-such-client"}), "invalid_client", "PAR push by an unknown client", 401)
    refused(c.push({**p2, "dpop_jkt": "short"}), "invalid_request", "PAR push with a malformed dpop_jkt")
    conf = ("auth-agent-test-confidential", "confidential-secret")
    refused(c.push({**p2, "client_id": conf[0]}), "invalid_client", "PAR push by a confidential client without its secret", 401)
    refused(c.push({**p2, "client_id": conf[0]}, auth=(conf[0], "wrong")), "invalid_client",
            "PAR push by a confidential client with a wrong secret", 401)
    r = c.push({**p2, "client_id": conf[0]}, auth=conf)
    check(r.status_code == 201, f"PAR push by a confidential client (client_secret_basic) -> 201 ({r.status_code})")
    # A DPoP header on the push (RFC 9449 §10.1): its key binds the code; with dpop_jkt too, they must match.
    P = c.par_url
    refused(c.push({**p2, "dpop_jkt": other.jkt}, key.proof("POST", P)), "invalid_dpop_proof",
            "PAR push whose dpop_jkt is not the DPoP header's key")
    refused(c.push(p2, key.proof("POST", T)), "invalid_dpop_proof", "PAR push with a proof for the token endpoint")
    verifier3, p3 = c.auth_params()
    r = c.push(p3, key.proof("POST", P))
    check(r.status_code == 201, f"PAR push with a DPoP header (no dpop_jkt) -> 201 ({r.status_code})")
    _, cb = c.authorize({"client_id": CLIENT, "request_uri": r.json()["request_uri"]})
    refused(c.exchange(cb["code"], verifier3, other.proof("POST", T)), "invalid_dpop_proof",
            "code of a push with a DPoP header, redeemed with another key")
    check(c.exchange(cb["code"], verifier3, key.proof("POST", T)).status_code == 200,
          "code of a push with a DPoP header, redeemed with that key -> 200")

    # The consent page keeps the pushed request (hidden request_uri) and the Authorize POST finishes it.
    verifier4, p4 = c.auth_params(client="auth-agent-test-consent", dpop_jkt=key.jkt)
    uri4 = c.push(p4).json()["request_uri"]
    r = c.browser.get(c.base + "/o/authorize/?" + urlencode({"client_id": p4["client_id"], "request_uri": uri4}),
                      timeout=30, allow_redirects=False)
    fields = dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', r.text))
    check(r.status_code == 200 and fields.get("request_uri") == uri4 and fields.get("dpop_jkt") == key.jkt,
          "PAR + consent page: the form carries request_uri and dpop_jkt")
    r = c.browser.post(c.base + "/o/authorize/", data={**fields, "allow": "Authorize"}, allow_redirects=False,
                       headers={"Referer": c.base + "/o/authorize/"}, timeout=30)
    loc = r.headers.get("Location", "")
    q = {k: v[0] for k, v in parse_qs(urlsplit(loc).query).items()}
    check(r.status_code == 302 and loc.startswith(REDIRECT) and "code" in q and q.get("state") == p4["state"],
          f"PAR + consent: Authorize -> code at the pushed redirect_uri ({r.status_code})")
    status, _ = c.authorize({"client_id": p4["client_id"], "request_uri": uri4})
    check(status == 400, "PAR + consent: request_uri used up after the consent")
    refused(c.exchange(q["code"], verifier4, other.proof("POST", T), client=p4["client_id"]), "invalid_dpop_proof",
            "PAR + consent: code bound to dpop_jkt")

    # The scripted browser (Tests/Fixtures/browser/fake-browser) follows a request_uri through the login.
    import selftest
    lst = selftest.Listener(p2["state"])
    import threading
    threading.Thread(target=lst.serve_forever, daemon=True).start()
    redirect = f"http://127.0.0.1:{lst.server_address[1]}/oauth2/callback/work"
    _, p5 = c.auth_params(state=p2["state"], redirect_uri=redirect)
    uri5 = c.push(p5).json()["request_uri"]
    proc = selftest.browse(c.base + "/o/authorize/?" + urlencode({"client_id": CLIENT, "request_uri": uri5}))
    lst.shutdown()
    check(proc.returncode == 0 and lst.code, f"fake-browser: PAR sign-in (login, request_uri kept) -> code "
                                             f"({proc.stderr.strip()})")


def run_device(c, key):
    T = c.token_url
    r = c.s.post(c.base + "/o/device-authorization/", data={"client_id": "auth-agent-test-device",
                                                           "scope": "openid offline_access"}, timeout=30)
    d = r.json()
    import selftest
    selftest.approve_device(c.base, d["user_code"], "accept")
    r = c.token({"grant_type": "urn:ietf:params:oauth:grant-type:device_code", "device_code": d["device_code"],
                 "client_id": "auth-agent-test-device"}, key.proof("POST", T))
    check(r.status_code == 200 and r.json()["token_type"] == "DPoP", "device grant with a proof -> 200 DPoP")
    refused(c.refresh(r.json()["refresh_token"], client="auth-agent-test-device"), "invalid_dpop_proof",
            "device grant's refresh token is bound")


def run_events(state_dir, key):
    events = [json.loads(line) for line in (state_dir / "events.jsonl").read_text().splitlines()]
    kinds = {e["event"] for e in events}
    check({"proof", "token", "resource", "par_push", "par_use", "par_done", "code"} <= kinds,
          f"events.jsonl has proof, token, resource, par_push, par_use, par_done, code events")
    check(any(e["event"] == "proof" and e["result"] == "refused" and "htu" in e["reason"] for e in events),
          "events.jsonl: a refused proof names its reason")
    check(any(e["event"] == "token" and e.get("jkt") == key.jkt and e["access_bound"] for e in events),
          "events.jsonl: issued tokens with their jkt")
    logs = "".join((state_dir / n).read_text() for n in ("events.jsonl", "requests.log"))
    leaked = [s for s in SECRETS if s in logs]
    check(not leaked and len(SECRETS) > 10, f"no token value ({len(SECRETS)} seen) in events.jsonl or requests.log")


# ---------------------------------------------------------------------------------------------------------------

def run_all(state_dir, strict, google):
    """The order saves time: the request_uri that must expire and the server restart run while other checks do."""
    base = "http://127.0.0.1:" + (state_dir / "port").read_text().strip()
    strict.wait()
    google.wait()
    c = AS(strict.base)
    _, p = c.auth_params()
    r = c.push(p)
    check(r.status_code == 201, f"strict: PAR push without a DPoP header needs no nonce -> 201 ({r.status_code})")
    expiring = (time.monotonic(), r.json()["request_uri"])  # left unused until it has expired
    g = google_before(google)
    google.restart()
    run_default(base, state_dir)
    run_strict(strict, expiring)
    google.wait()
    google_after(google, g)


def run_strict(srv, expiring):
    c = AS(srv.base)
    key, T = Key(), c.token_url
    a, b = c.metadata()
    check(a.get("require_pushed_authorization_requests") is True and b.get("require_pushed_authorization_requests")
          is True, "strict: both metadata documents say require_pushed_authorization_requests")
    verifier, p = c.auth_params(dpop_jkt=key.jkt)
    status, cb = c.authorize(p)
    check(status == 302 and cb and cb.get("error") == "invalid_request" and cb.get("state") == p["state"],
          "strict (AS_PAR=required): plain authorization request -> redirect with error=invalid_request")
    status, _ = c.authorize({**p, "redirect_uri": "http://127.0.0.1/unregistered"})
    check(status == 400, "strict: plain request with an unregistered redirect_uri -> 400 page")
    uri = c.push(p).json()["request_uri"]
    status, cb = c.authorize({"client_id": CLIENT, "request_uri": uri})
    check(status == 302 and cb and "code" in cb, "strict: authorization with request_uri -> code")

    refused(c.exchange(cb["code"], verifier), "invalid_dpop_proof", "strict (AS_DPOP=required): no proof")
    r = c.exchange(cb["code"], verifier, key.proof("POST", T))
    refused(r, "use_dpop_nonce", "strict: proof without a nonce")
    n1 = r.headers.get("DPoP-Nonce")
    check(bool(n1), "strict: use_dpop_nonce answer carries DPoP-Nonce")
    refused(c.exchange(cb["code"], verifier, key.proof("POST", T, nonce="made-up")), "use_dpop_nonce",
            "strict: proof with a made-up nonce")
    r = c.exchange(cb["code"], verifier, key.proof("POST", T, nonce=n1))
    check(r.status_code == 200 and r.json()["token_type"] == "DPoP" and r.headers.get("DPoP-Nonce")
          and r.headers["DPoP-Nonce"] != n1,
          f"strict: proof with the server's nonce -> 200 DPoP, with a fresh DPoP-Nonce ({r.status_code})")
    tok = r.json()
    # Every answer brings a fresh nonce and only the last AS_DPOP_NONCE_KEEP=2 are accepted: n1 is stale now.
    refused(c.refresh(tok["refresh_token"]), "invalid_dpop_proof", "strict: refresh without a proof")
    r = c.refresh(tok["refresh_token"], key.proof("POST", T, nonce=n1))
    refused(r, "use_dpop_nonce", "strict: nonce older than the last AS_DPOP_NONCE_KEEP=2 answers")
    r = c.refresh(tok["refresh_token"], key.proof("POST", T, nonce=r.headers["DPoP-Nonce"]))
    check(r.status_code == 200, f"strict: refresh with the latest nonce -> 200 ({r.status_code})")
    n3 = r.headers["DPoP-Nonce"]
    at = r.json()["access_token"]

    R = c.resource
    r = c.get_resource("DPoP", at, key.proof("GET", R, token=at))
    rs_refused(r, "use_dpop_nonce", "proof without the resource's nonce (AS_RS_NONCE=1)")
    rn = r.headers.get("DPoP-Nonce")
    rs_refused(c.get_resource("DPoP", at, key.proof("GET", R, token=at, nonce=n3)), "use_dpop_nonce",
               "the authorization server's nonce")
    r = c.get_resource("DPoP", at, key.proof("GET", R, token=at, nonce=rn))
    check(r.status_code == 200 and r.headers.get("DPoP-Nonce"), f"resource: proof with its nonce -> 200 ({r.status_code})")

    P = c.par_url
    _, p2 = c.auth_params()
    r = c.push(p2, key.proof("POST", P))
    refused(r, "use_dpop_nonce", "strict: PAR push with a DPoP header but no nonce")
    r = c.push(p2, key.proof("POST", P, nonce=r.headers["DPoP-Nonce"]))
    check(r.status_code == 201, f"strict: PAR push with a DPoP header and the nonce -> 201 ({r.status_code})")

    d = c.s.post(c.base + "/o/device-authorization/", data={"client_id": "auth-agent-test-device"}, timeout=30).json()
    refused(c.token({"grant_type": "urn:ietf:params:oauth:grant-type:device_code", "device_code": d["device_code"],
                     "client_id": "auth-agent-test-device"}), "invalid_dpop_proof",
            "strict: device-code poll without a proof")

    time.sleep(max(0.0, 3.2 - (time.monotonic() - expiring[0])))
    status, _ = c.authorize({"client_id": CLIENT, "request_uri": expiring[1]})
    check(status == 400, "strict: request_uri past its expires_in (AS_PAR_EXPIRES=3) -> 400")


def google_before(srv):
    c = AS(srv.base)
    key, other, T = Key(), Key(), c.token_url
    code, verifier = c.code()
    r = c.exchange(code, verifier, key.proof("POST", T))
    check(r.status_code == 200 and r.json()["token_type"] == "Bearer",
          "refresh-only binding (AS_DPOP_BIND=refresh): code exchange with a proof -> token_type Bearer")
    tok = r.json()
    check("cnf" not in c.introspect(tok["access_token"]), "refresh-only binding: access token has no cnf")
    check(c.get_resource("Bearer", tok["access_token"]).status_code == 200, "refresh-only: access token works as Bearer")
    refused(c.refresh(tok["refresh_token"]), "invalid_dpop_proof", "refresh-only: bound refresh token without a proof")
    refused(c.refresh(tok["refresh_token"], other.proof("POST", T)), "invalid_dpop_proof",
            "refresh-only: bound refresh token with another key")
    return c, key, other, tok


def google_after(srv, g):
    # Bindings live in the DB: they survive the restart (run_all restarted the server in between).
    c, key, other, tok = g
    T = c.token_url
    refused(c.refresh(tok["refresh_token"], other.proof("POST", T)), "invalid_dpop_proof",
            "refresh-only: after a server restart, another key is still refused")
    r = c.refresh(tok["refresh_token"], key.proof("POST", T))
    check(r.status_code == 200 and r.json()["token_type"] == "Bearer", "refresh-only: refresh with the key -> 200 Bearer")
    refused(c.refresh(r.json()["refresh_token"], other.proof("POST", T)), "invalid_dpop_proof",
            "refresh-only: the rotated refresh token is bound too")

    _, p = c.auth_params(dpop_jkt=key.jkt)
    refused(c.push(p, key.proof("POST", c.par_url)), "invalid_request",
            "AS_PAR_DPOP_HEADER=refuse: PAR push with a DPoP header")
    check(c.push(p).status_code == 201, "AS_PAR_DPOP_HEADER=refuse: PAR push with dpop_jkt only -> 201")
