"""Django settings for the loopback test authorization server (never use in production).

Environment:
  AS_STATE_DIR              (required) sqlite DB, RSA key, request log live here
  AS_PORT                   port the server listens on (serve.py sets it); issuer = http://127.0.0.1:AS_PORT/o
  AS_ACCESS_TOKEN_LIFETIME  access-token lifetime in seconds (default 60)
  AS_AUTHZ_RESPONSE_ISS     "1" adds RFC 9207 `iss` to authorization responses (default off)
  AS_ROTATE_REFRESH_TOKEN   "0" keeps the refresh token on refresh instead of rotating it (default "1")
  AS_REFRESH_GRACE_SECONDS  seconds a rotated-out refresh token still answers a retry with the pair it already
                            issued (default 0: it dies at once, as GitLab's does)
  AS_DPOP*, AS_RS_NONCE     DPoP (RFC 9449): asproject/dpop.py
  AS_PAR*                   pushed authorization requests (RFC 9126): asproject/views.py
"""
import os
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

try:
    STATE_DIR = Path(os.environ["AS_STATE_DIR"]).resolve()
except KeyError:
    raise SystemExit("AS_STATE_DIR must be set")
STATE_DIR.mkdir(parents=True, exist_ok=True)
PORT = int(os.environ.get("AS_PORT", "8000"))
ISSUER = f"http://127.0.0.1:{PORT}/o"


def _rsa_key_pem():
    """RS256 signing key, generated once per STATE_DIR and reused."""
    path = STATE_DIR / "oidc-rsa.pem"
    if not path.exists():
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_bytes(pem)
        os.replace(tmp, path)
    return path.read_text()


BASE_DIR = Path(__file__).resolve().parent
SECRET_KEY = "test-only-not-secret-0123456789abcdefghijklmnopqrstuvwxyz"
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "[::1]"]
USE_TZ = True
ROOT_URLCONF = "asproject.urls"
WSGI_APPLICATION = "asproject.wsgi.application"
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"

INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "oauth2_provider",
    "asproject",
]
MIDDLEWARE = [
    "asproject.middleware.RequestLogMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
]
TEMPLATES = [{
    "BACKEND": "django.template.backends.django.DjangoTemplates",
    "DIRS": [BASE_DIR / "templates"],
    "APP_DIRS": True,
    "OPTIONS": {"context_processors": ["django.template.context_processors.request"]},
}]
DATABASES = {"default": {
    "ENGINE": "django.db.backends.sqlite3",
    "NAME": STATE_DIR / "db.sqlite3",
    "OPTIONS": {
        "timeout": 30,
        "transaction_mode": "IMMEDIATE",
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    },
}}
# No DB-backed sessions: fewer sqlite writes, and no sessions migration.
SESSION_ENGINE = "django.contrib.sessions.backends.signed_cookies"
# Fast hashing: this is a throwaway test fixture.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/accounts/login/"
LOGGING = {  # server errors (500s) with tracebacks go to stderr
    "version": 1, "disable_existing_loggers": False,
    "handlers": {"stderr": {"class": "logging.StreamHandler"}},
    "loggers": {"django.request": {"level": "ERROR", "handlers": ["stderr"], "propagate": False},
                "waitress": {"level": "ERROR", "handlers": ["stderr"], "propagate": False}},
}
SILENCED_SYSTEM_CHECKS = ["oauth2_provider.W001", "oauth2_provider.W002"]

OAUTH2_PROVIDER = {
    "PKCE_REQUIRED": True,
    # AS_ROTATE_REFRESH_TOKEN=0: keep the refresh token on refresh, as Google does (e2e/test_provider_quirks.py).
    "ROTATE_REFRESH_TOKEN": os.environ.get("AS_ROTATE_REFRESH_TOKEN", "1") == "1",
    # AS_REFRESH_GRACE_SECONDS: a reuse window for a rotated refresh token, as Auth0 and Okta offer.
    "REFRESH_TOKEN_GRACE_PERIOD_SECONDS": int(os.environ.get("AS_REFRESH_GRACE_SECONDS", "0")),
    "ACCESS_TOKEN_EXPIRE_SECONDS": int(os.environ.get("AS_ACCESS_TOKEN_LIFETIME", "60")),
    "AUTHORIZATION_CODE_EXPIRE_SECONDS": 120,
    "OIDC_ENABLED": True,
    "OIDC_ISS_ENDPOINT": ISSUER,
    "OIDC_RSA_PRIVATE_KEY": _rsa_key_pem(),
    "OAUTH2_VALIDATOR_CLASS": "asproject.validator.Validator",
    "COMPLIANT_BCP_RFC9700_AUTHZ_RESPONSE_ISS": os.environ.get("AS_AUTHZ_RESPONSE_ISS") == "1",
    "COMPLIANT_BCP_RFC9700_PKCE_METHOD": True,  # S256 only ("plain" rejected)
    "SCOPES": {
        "openid": "OpenID Connect",
        "email": "Email address",
        "profile": "Profile",
        "offline_access": "Offline access",
        "read": "Read",
        "write": "Write",
        "introspection": "Token introspection",
    },
    "DEFAULT_SCOPES": ["read"],
    "OAUTH_DEVICE_VERIFICATION_URI": ISSUER + "/device/",
    "DEVICE_FLOW_INTERVAL": int(os.environ.get("AS_DEVICE_INTERVAL", "1")),
    # RFC 8252 §7.1 private-use scheme redirects (serve.PRIVATE_USE_REDIRECT), next to loopback http.
    "ALLOWED_REDIRECT_URI_SCHEMES": ["http", "https", "org.example.authagent"],
}
