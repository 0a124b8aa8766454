"""DPoP (RFC 9449) proof checking, server nonces, key bindings and the event log of the test authorization server.

Configuration (environment, read once at start; README.md documents each):
  AS_DPOP              off | optional (default) | required
  AS_DPOP_ALGS         comma list of accepted proof algorithms (default ES256,RS256,PS256,EdDSA)
  AS_DPOP_NONCE        "1": the token and PAR endpoints require a server nonce in every proof
  AS_DPOP_NONCE_KEEP   how many of the most recent nonces are accepted (default 3)
  AS_DPOP_BIND         access (default: access and refresh token bound, token_type DPoP) |
                       refresh (Google's way: only the refresh token is bound, token_type Bearer)
  AS_DPOP_IAT_WINDOW   seconds a proof's iat may lie in the past (default 60; 5 s into the future)
  AS_RS_NONCE          "1": the protected resource /api/resource requires its own nonce
"""
import base64
import hashlib
import json
import os
import re
import secrets
import threading
import time
from collections import deque
from urllib.parse import quote, unquote, urlsplit

from django.conf import settings
from django.db import IntegrityError, transaction
from jwcrypto import jwk, jws

MODE = os.environ.get("AS_DPOP", "optional")
if MODE not in ("off", "optional", "required"):
    raise SystemExit(f"AS_DPOP must be off, optional or required, not {MODE!r}")
ALGS = [a.strip() for a in os.environ.get("AS_DPOP_ALGS", "ES256,RS256,PS256,EdDSA").split(",") if a.strip()]
_KNOWN_ALGS = {"ES256", "ES384", "ES512", "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "EdDSA"}
if not ALGS or set(ALGS) - _KNOWN_ALGS:
    raise SystemExit(f"AS_DPOP_ALGS: unsupported {sorted(set(ALGS) - _KNOWN_ALGS)} (known: {sorted(_KNOWN_ALGS)})")
NONCE = os.environ.get("AS_DPOP_NONCE") == "1"
NONCE_KEEP = max(1, int(os.environ.get("AS_DPOP_NONCE_KEEP", "3")))
BIND = os.environ.get("AS_DPOP_BIND", "access")
if BIND not in ("access", "refresh"):
    raise SystemExit(f"AS_DPOP_BIND must be access or refresh, not {BIND!r}")
IAT_WINDOW = int(os.environ.get("AS_DPOP_IAT_WINDOW", "60"))
IAT_FUTURE = 5
RS_NONCE = os.environ.get("AS_RS_NONCE") == "1"

_COMPACT = re.compile(r"^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$")
_PRIVATE_MEMBERS = {"d", "p", "q", "dp", "dq", "qi", "oth", "k"}
_JKT = re.compile(r"^[A-Za-z0-9_-]{43}$")


def sha256_hex(value: str) -> str:
    return hashlib.sha256(value.encode("utf-8")).hexdigest()


def ref(value: str) -> str:
    """What the event log says instead of a token, code or request_uri: the first 16 hex of its SHA-256."""
    return sha256_hex(value)[:16]


def ath(token: str) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(token.encode("ascii")).digest()).rstrip(b"=").decode()


def valid_jkt(value: str) -> bool:
    return bool(_JKT.match(value or ""))


# ---------------------------------------------------------------------------------------------------------------
# Event log: STATE_DIR/events.jsonl, one JSON object per line. Never a token, code, proof or request_uri value.

_events_lock = threading.Lock()
_events = None


def event(kind: str, **fields):
    global _events
    line = json.dumps({"t": round(time.time(), 3), "event": kind, **fields}, sort_keys=True) + "\n"
    with _events_lock:
        if _events is None:
            _events = open(settings.STATE_DIR / "events.jsonl", "a", buffering=1, encoding="utf-8")
        _events.write(line)


# ---------------------------------------------------------------------------------------------------------------
# Server nonces (RFC 9449 §8, §9): a fresh one on every answer of the endpoint; the last NONCE_KEEP are accepted.

class Nonces:
    def __init__(self, keep):
        self._lock = threading.Lock()
        self._recent = deque(maxlen=keep)

    def fresh(self) -> str:
        value = secrets.token_urlsafe(24)
        with self._lock:
            self._recent.append(value)
        return value

    def accepts(self, value) -> bool:
        with self._lock:
            return isinstance(value, str) and value in self._recent


AS_NONCES = Nonces(NONCE_KEEP)  # token endpoint and PAR endpoint
RS_NONCES = Nonces(NONCE_KEEP)  # /api/resource


# ---------------------------------------------------------------------------------------------------------------
# htu comparison: RFC 9449 §4.3 step 9 (query and fragment ignored) with RFC 3986 §6.2.2 syntax-based and §6.2.3
# scheme-based normalization: scheme and host lower case, default port dropped, empty path = "/", percent-encoding
# upper case, unreserved characters decoded, dot segments removed.

_UNRESERVED = "-._~"


def _norm_pct(path: str) -> str:
    # Decode only the unreserved characters, re-encode nothing else; upper-case the remaining escapes.
    def fix(m):
        ch = chr(int(m.group(1), 16))
        return ch if (ch.isascii() and (ch.isalnum() or ch in _UNRESERVED)) else "%" + m.group(1).upper()
    return re.sub(r"%([0-9A-Fa-f]{2})", fix, path)


def _remove_dot_segments(path: str) -> str:
    out = []
    for seg in path.split("/"):
        if seg == ".":
            continue
        if seg == "..":
            if len(out) > 1:
                out.pop()
            continue
        out.append(seg)
    result = "/".join(out)
    if path.endswith(("/.", "/..")):
        result += "/"
    return result or "/"


def normalize_uri(uri):
    """The comparable form of an http(s) URI, or None if it is not one (userinfo counts as not one)."""
    if not isinstance(uri, str):
        return None
    try:
        p = urlsplit(uri)
        port = p.port
    except ValueError:
        return None
    scheme = p.scheme.lower()
    if scheme not in ("http", "https") or not p.hostname or "@" in p.netloc:
        return None
    host = p.hostname.lower()
    if ":" in host:
        host = f"[{host}]"
    if port is not None and port != {"http": 80, "https": 443}[scheme]:
        host = f"{host}:{port}"
    path = _remove_dot_segments(_norm_pct(p.path or "/"))
    return f"{scheme}://{host}{path}"


def request_url(request) -> str:
    """The target URI of a request as this server sees it (Host header, path; no query)."""
    return f"{request.scheme}://{request.get_host()}{quote(request.path)}"


# ---------------------------------------------------------------------------------------------------------------
# Proof checking: RFC 9449 §4.3.

class ProofError(Exception):
    def __init__(self, error, reason):
        super().__init__(reason)
        self.error, self.reason = error, reason


def proof_header(request):
    """The DPoP header's value, None if absent; ProofError if sent more than once (waitress joins repeated
    headers with ", ", which a compact JWS never contains)."""
    value = request.META.get("HTTP_DPOP")
    if value is None:
        return None
    if "," in value:
        raise ProofError("invalid_dpop_proof", "more than one DPoP header")
    return value.strip()


def check_proof(value, request, nonces=None, access_token=None, jkt=None):
    """Verifies one proof for this request and returns (jkt, claims). Checks, in this order (each failure is a
    ProofError naming it): compact JWS; typ dpop+jwt; alg in ALGS; jwk present, public, no private members;
    signature; claims jti/htm/htu/iat present; htm = request method; htu = request URL (normalized, query and
    fragment ignored); iat within [now - IAT_WINDOW, now + 5]; ath = SHA-256 of access_token (when given); key =
    jkt (when given); nonce accepted by `nonces` (when given: use_dpop_nonce); jti not seen before."""
    if not _COMPACT.match(value or ""):
        raise ProofError("invalid_dpop_proof", "not a compact JWS")
    token = jws.JWS()
    try:
        token.deserialize(value)
        header = token.jose_header
    except Exception:
        raise ProofError("invalid_dpop_proof", "not a compact JWS")
    if not isinstance(header, dict) or header.get("typ") != "dpop+jwt":
        raise ProofError("invalid_dpop_proof", "typ is not dpop+jwt")
    alg = header.get("alg")
    if alg not in ALGS:
        raise ProofError("invalid_dpop_proof", f"alg {alg!r} not supported")
    key_dict = header.get("jwk")
    if not isinstance(key_dict, dict):
        raise ProofError("invalid_dpop_proof", "no jwk in the header")
    if _PRIVATE_MEMBERS & set(key_dict) or key_dict.get("kty") == "oct":
        raise ProofError("invalid_dpop_proof", "jwk has private key members")
    try:
        key = jwk.JWK(**key_dict)
    except Exception:
        raise ProofError("invalid_dpop_proof", "jwk is not a usable key")
    try:
        token.allowed_algs = [alg]
        token.verify(key, alg=alg)
        claims = json.loads(token.payload)
    except Exception:
        raise ProofError("invalid_dpop_proof", "signature does not verify")
    proof_jkt = key.thumbprint()
    if not isinstance(claims, dict):
        raise ProofError("invalid_dpop_proof", "claims are not a JSON object")
    for name in ("jti", "htm", "htu", "iat"):
        if name not in claims:
            raise ProofError("invalid_dpop_proof", f"claim {name} missing")
    if not isinstance(claims["jti"], str) or not claims["jti"]:
        raise ProofError("invalid_dpop_proof", "jti is not a non-empty string")
    if claims["htm"] != request.method:
        raise ProofError("invalid_dpop_proof", f"htm {claims['htm']!r} is not {request.method}")
    expected = normalize_uri(request_url(request))
    if normalize_uri(claims["htu"]) != expected:
        raise ProofError("invalid_dpop_proof", f"htu does not match {expected}")
    iat = claims["iat"]
    now = time.time()
    if not isinstance(iat, (int, float)) or isinstance(iat, bool):
        raise ProofError("invalid_dpop_proof", "iat is not a number")
    if iat < now - IAT_WINDOW or iat > now + IAT_FUTURE:
        raise ProofError("invalid_dpop_proof", f"iat is {int(now - iat)} s old (window {IAT_WINDOW} s)")
    if access_token is not None and claims.get("ath") != ath(access_token):
        raise ProofError("invalid_dpop_proof", "ath missing or not the access token's hash")
    if jkt is not None and proof_jkt != jkt:
        raise ProofError("invalid_dpop_proof", "proof key is not the key the token is bound to")
    if nonces is not None and not nonces.accepts(claims.get("nonce")):
        raise ProofError("use_dpop_nonce", "nonce missing" if "nonce" not in claims else "nonce not current")
    _remember_jti(proof_jkt, claims["jti"], now)
    return proof_jkt, claims


_last_prune = [0.0]


def _remember_jti(proof_jkt, jti, now):
    from .models import SeenProof

    if now - _last_prune[0] > 30:
        _last_prune[0] = now
        SeenProof.objects.filter(seen__lt=now - IAT_WINDOW - IAT_FUTURE - 5).delete()
    try:
        with transaction.atomic():
            SeenProof.objects.create(key=sha256_hex(f"{proof_jkt}.{jti}"), seen=now)
    except IntegrityError:
        raise ProofError("invalid_dpop_proof", "jti already used (replayed proof)")


# ---------------------------------------------------------------------------------------------------------------
# Bindings (token or code SHA-256 -> jkt).

def bind(value: str, kind: str, jkt: str):
    from .models import Binding

    Binding.objects.update_or_create(token_sha256=sha256_hex(value), defaults={"kind": kind, "jkt": jkt})


def bound_jkt(value: str, kind: str):
    from .models import Binding

    b = Binding.objects.filter(token_sha256=sha256_hex(value), kind=kind).first()
    return b.jkt if b else None
