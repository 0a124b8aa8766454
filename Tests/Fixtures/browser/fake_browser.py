"""Scripted browser: logs in to the test authorization server and delivers the
authorization response to the agent's loopback listener. See ../README.md.

A redirect to a private-use URI scheme (RFC 8252 §7.1, `com.example.app:/path?...`) is handed over the way a desktop
does it: the handler registered for `x-scheme-handler/<scheme>` in $XDG_DATA_HOME/applications (default
~/.local/share/applications) is run with the URI in place of %u (no shell); its exit status stands in for the HTTP
status (0 -> 200, else 400).

Env: FAKE_BROWSER_MODE (login|deny|wrong-state|wrong-iss|none|fail|print-redirect), FAKE_BROWSER_USER,
FAKE_BROWSER_PASSWORD, FAKE_BROWSER_LOG. Never logs codes, states, tokens or queries
(print-redirect prints the final redirect URL, with its code, on stdout: that is its purpose).
FAKE_BROWSER_PROC_DUMP=FILE: on start, appends this process's own /proc/self/cmdline and /proc/self/environ
(what the agent gave it) to FILE, so a test can check that no token reached the browser's argv or environment, then
its cgroup and the Seccomp, Seccomp_filters and NoNewPrivs lines of its status (which unit and filters it runs under).
"""
import os
import re
import secrets
import shlex
import subprocess
import sys
from urllib.parse import parse_qs, urlencode, urljoin, urlsplit, urlunsplit

TIMEOUT = 30
LOG = os.environ.get("FAKE_BROWSER_LOG")
LOOPBACK_HOSTS = ("127.0.0.1", "::1")


def log(line):
    if LOG:
        with open(LOG, "a", encoding="utf-8") as f:
            f.write(line + "\n")


def fail(reason):
    log(f"FAIL {reason}")
    print(f"fake-browser: {reason}", file=sys.stderr)
    sys.exit(1)


def path_of(url):
    return urlsplit(url).path or "/"


def with_query(url, params):
    p = urlsplit(url)
    return urlunsplit((p.scheme, p.netloc, p.path, urlencode(params), ""))


class Browser:
    def __init__(self):
        import requests

        self.requests = requests
        self.s = requests.Session()
        self.s.trust_env = False  # ignore proxies / netrc from the agent's environment
        self.s.headers["User-Agent"] = "fake-browser/1"

    def request(self, method, url, note="", **kw):
        try:
            r = self.s.request(method, url, allow_redirects=False, timeout=TIMEOUT, **kw)
        except self.requests.RequestException as e:
            # Exception text may contain the full URL (code/state): report type + path only.
            fail(f"{method} {urlsplit(url).netloc}{path_of(url)}: {type(e).__name__}")
        log(f"{method} {path_of(url)} -> {r.status_code}{note}")
        return r


def is_private_use(url):
    return urlsplit(url).scheme not in ("http", "https")


def is_callback(url, as_netloc):
    p = urlsplit(url)
    if is_private_use(url):
        return True
    return (p.scheme == "http" and p.hostname in LOOPBACK_HOSTS
            and as_netloc is not None and p.netloc != as_netloc)


def scheme_handler(scheme):
    """The Exec line of the .desktop file registered for x-scheme-handler/<scheme>, as argv with %u left in."""
    home = os.environ.get("XDG_DATA_HOME") or os.path.join(os.environ["HOME"], ".local", "share")
    apps = os.path.join(home, "applications")
    for name in sorted(os.listdir(apps)) if os.path.isdir(apps) else []:
        if not name.endswith(".desktop"):
            continue
        with open(os.path.join(apps, name), encoding="utf-8") as f:
            entry = dict(line.rstrip("\n").split("=", 1) for line in f if "=" in line and not line.startswith("#"))
        if f"x-scheme-handler/{scheme}" in entry.get("MimeType", "").split(";"):
            # Desktop Entry Spec: string unescaping first, then shell-like quoting; %% is a literal %.
            return [arg.replace("%%", "%") for arg in shlex.split(entry["Exec"].replace("\\\\", "\\"))]
    return None


def hand_to_desktop(url, note):
    scheme = urlsplit(url).scheme
    argv = scheme_handler(scheme)
    if argv is None:
        log(f"SCHEME {scheme} -> no handler{note}")
        return 404
    result = subprocess.run([url if a == "%u" else a for a in argv], stdin=subprocess.DEVNULL,
                            capture_output=True, text=True, timeout=TIMEOUT)
    log(f"SCHEME {scheme} -> exit {result.returncode}{note}")
    return 200 if result.returncode == 0 else 400


def login_form(html):
    if 'name="password"' not in html:
        return None
    m = re.search(r'name="csrfmiddlewaretoken"\s+value="([^"]+)"', html)
    if not m:
        fail("login form without csrf token")
    action = re.search(r'<form[^>]*action="([^"]*)"', html)
    nxt = re.search(r'name="next"\s+value="([^"]*)"', html)
    return m.group(1), (action.group(1) if action else ""), (nxt.group(1).replace("&amp;", "&") if nxt else "")


def run_flow(b, url):
    """Follows redirects / logs in until a redirect to the loopback callback; returns its URL."""
    as_netloc = None
    logged_in = False
    for _ in range(30):
        if "/o/authorize" in path_of(url):
            as_netloc = urlsplit(url).netloc
        r = b.request("GET", url)
        while True:
            if r.is_redirect:
                url = urljoin(url, r.headers["Location"])
                if is_callback(url, as_netloc):
                    return url
                break
            if r.status_code != 200:
                fail(f"unexpected HTTP {r.status_code} at {path_of(url)}")
            form = login_form(r.text)
            if form is None:
                fail(f"no redirect and no login form at {path_of(url)}")
            if logged_in:
                fail("login rejected (bad username/password?)")
            token, action, nxt = form
            url = urljoin(url, action or url)
            r = b.request("POST", url, data={
                "csrfmiddlewaretoken": token, "next": nxt,
                "username": os.environ.get("FAKE_BROWSER_USER", "alice"),
                "password": os.environ.get("FAKE_BROWSER_PASSWORD", "correct-horse-battery"),
            }, headers={"Referer": url})
            logged_in = True
    fail("too many redirects")


def deliver(b, url, note=""):
    if is_private_use(url):
        return hand_to_desktop(url, note)
    r = b.request("GET", url, note=note)
    return r.status_code


def main():
    mode = os.environ.get("FAKE_BROWSER_MODE", "login") or "login"
    if mode not in ("login", "deny", "wrong-state", "wrong-iss", "none", "fail", "print-redirect"):
        print(f"fake-browser: unknown FAKE_BROWSER_MODE {mode!r}", file=sys.stderr)
        sys.exit(2)
    if len(sys.argv) != 2:
        print("usage: fake-browser URL", file=sys.stderr)
        sys.exit(2)
    log(f"START mode={mode}")
    dump = os.environ.get("FAKE_BROWSER_PROC_DUMP")
    if dump:
        with open(dump, "ab") as f:
            for name in ("cmdline", "environ"):
                with open(f"/proc/self/{name}", "rb") as src:
                    f.write(f"== {name}\n".encode() + src.read().replace(b"\0", b"\n") + b"\n")
            # Where it runs and under which filters (the user manager stage checks it escaped the agent's unit).
            with open("/proc/self/cgroup", "rb") as src:
                f.write(b"== cgroup\n" + src.read())
            with open("/proc/self/status", "rb") as src:
                f.write(b"== status\n" + b"".join(line for line in src
                                                    if line.startswith((b"Seccomp", b"NoNewPrivs:"))))
    if mode == "fail":
        fail("simulated browser failure (FAKE_BROWSER_MODE=fail)")
    if mode == "none":
        log("DONE none")
        return

    original = sys.argv[1]
    b = Browser()
    callback = run_flow(b, original)
    query = parse_qs(urlsplit(callback).query)
    if mode == "print-redirect":
        # Manual paste: a browser on another machine cannot reach the loopback URI; the user copies it instead.
        print(callback)
        log("DONE print-redirect")
        return
    if mode == "deny":
        params = {"error": "access_denied"}
        state = parse_qs(urlsplit(original).query).get("state")
        if state:
            params["state"] = state[0]
        status = deliver(b, with_query(callback, params), " (callback, error=access_denied)")
        log(f"DONE deny callback={status}")
        return
    if "code" not in query:  # AS error redirect: deliver it like a real browser, then fail
        status = deliver(b, callback, " (callback, AS error)")
        fail(f"authorization server returned error={query.get('error', ['?'])[0]} "
             f"(callback answered HTTP {status})")
    if mode == "wrong-state":
        params = {k: v[0] for k, v in query.items()}
        params["state"] = "wrong-" + secrets.token_hex(8)
        first = deliver(b, with_query(callback, params), " (callback, wrong state)")
        if first < 400:
            print(f"fake-browser: warning: wrong state accepted with HTTP {first}", file=sys.stderr)
    if mode == "wrong-iss":
        # RFC 9207 mix-up: the same response claiming another issuer, then without any iss.
        params = {k: v[0] for k, v in query.items()}
        params["iss"] = "https://evil.example/o"
        wrong = deliver(b, with_query(callback, params), " (callback, wrong iss)")
        del params["iss"]
        missing = deliver(b, with_query(callback, params), " (callback, no iss)")
        if wrong < 400 or missing < 400:
            print(f"fake-browser: warning: bad iss accepted ({wrong}, {missing})", file=sys.stderr)
    status = deliver(b, callback, " (callback)")
    if status >= 400:
        fail(f"callback returned HTTP {status}")
    log(f"DONE {mode} callback={status}")


if __name__ == "__main__":
    main()
