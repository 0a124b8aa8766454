#!/usr/bin/env python
"""Usage: serve.py STATE_DIR [PORT]

Migrates + seeds the sqlite DB in STATE_DIR, then serves (waitress, threaded) on
127.0.0.1:PORT (default: a free port) in the foreground. Once the server answers
HTTP it writes STATE_DIR/port, STATE_DIR/issuer and STATE_DIR/ready.
"""
import os
import signal
import socket
import sys
import threading
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
# A private-use URI scheme redirect (RFC 8252 §7.1) for the `work` account of the scheme-handler tests.
PRIVATE_USE_REDIRECT = "org.example.authagent:/oauth2/callback/work"
REDIRECT_URIS = " ".join([
    f"http://{host}/oauth2/callback/{name}"
    for host in ("127.0.0.1", "[::1]")
    for name in ("work", "personal", "other")
] + [PRIVATE_USE_REDIRECT])


def seed():
    from django.contrib.auth import get_user_model
    from oauth2_provider.models import get_application_model

    User = get_user_model()
    user, _ = User.objects.get_or_create(username="alice", defaults={"email": "alice@example.test"})
    if user.email != "alice@example.test" or not user.check_password("correct-horse-battery"):
        user.email = "alice@example.test"
        user.set_password("correct-horse-battery")
        user.save()

    App = get_application_model()
    apps = [
        dict(client_id="auth-agent-test", name="auth-agent-test", client_type=App.CLIENT_PUBLIC,
             authorization_grant_type=App.GRANT_AUTHORIZATION_CODE, client_secret="",
             redirect_uris=REDIRECT_URIS),
        dict(client_id="auth-agent-test-confidential", name="auth-agent-test-confidential",
             client_type=App.CLIENT_CONFIDENTIAL, authorization_grant_type=App.GRANT_AUTHORIZATION_CODE,
             client_secret="confidential-secret", redirect_uris=REDIRECT_URIS),
        # The same as auth-agent-test, but the person is asked: DOT's consent page (Authorize / Cancel).
        dict(client_id="auth-agent-test-consent", name="auth-agent-test-consent", client_type=App.CLIENT_PUBLIC,
             authorization_grant_type=App.GRANT_AUTHORIZATION_CODE, client_secret="",
             redirect_uris=REDIRECT_URIS, skip_authorization=False),
        dict(client_id="auth-agent-test-device", name="auth-agent-test-device", client_type=App.CLIENT_PUBLIC,
             authorization_grant_type=App.GRANT_DEVICE_CODE, client_secret="", redirect_uris=""),
        dict(client_id="introspector", name="introspector", client_type=App.CLIENT_CONFIDENTIAL,
             authorization_grant_type=App.GRANT_CLIENT_CREDENTIALS, client_secret="introspector-secret",
             redirect_uris=""),
    ]
    for spec in apps:
        app = App.objects.filter(client_id=spec["client_id"]).first() or App(client_id=spec["client_id"])
        app.skip_authorization = True
        for k, v in spec.items():
            setattr(app, k, v)
        # Stored in plain text (hash_client_secret=False): the plain secret works with
        # client_secret_basic/post and avoids a slow password hash on every request.
        app.hash_client_secret = False
        app.algorithm = App.RS256_ALGORITHM
        app.user = user
        app.save()


def write_state(state_dir, name, text):
    tmp = state_dir / f".{name}.tmp"
    tmp.write_text(text)
    os.replace(tmp, state_dir / name)


def announce_when_ready(state_dir, port):
    url = f"http://127.0.0.1:{port}/o/.well-known/openid-configuration"
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    for _ in range(600):
        try:
            with opener.open(url, timeout=5) as resp:
                if resp.status == 200:
                    break
        except OSError:
            pass
        time.sleep(0.05)
    else:
        print("serve.py: server never answered", file=sys.stderr)
        os._exit(1)
    write_state(state_dir, "port", f"{port}\n")
    write_state(state_dir, "issuer", f"http://127.0.0.1:{port}/o\n")
    write_state(state_dir, "ready", f"{os.getpid()}\n")


def main():
    if not 2 <= len(sys.argv) <= 3:
        sys.exit(__doc__)
    t0 = time.monotonic()
    state_dir = Path(sys.argv[1]).resolve()
    state_dir.mkdir(parents=True, exist_ok=True)
    for name in ("ready", "port", "issuer"):
        (state_dir / name).unlink(missing_ok=True)

    # Bind first so the port is known (and reserved) before Django reads its settings.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(("127.0.0.1", int(sys.argv[2]) if len(sys.argv) == 3 else 0))
    except OSError as e:
        sys.exit(f"serve.py: cannot listen on 127.0.0.1:{sys.argv[2]}: {e.strerror}")
    port = sock.getsockname()[1]

    os.environ["AS_STATE_DIR"] = str(state_dir)
    os.environ["AS_PORT"] = str(port)
    os.environ["DJANGO_SETTINGS_MODULE"] = "asproject.settings"
    sys.path.insert(0, str(HERE))
    import django
    from django.core.management import call_command

    django.setup()
    import asproject.views  # noqa: F401  (reads and checks the AS_DPOP*/AS_PAR* settings: a bad value exits now)
    call_command("migrate", verbosity=0, interactive=False)
    seed()

    from waitress import create_server

    from asproject.wsgi import application

    server = create_server(application, sockets=[sock], threads=16, connection_limit=500,
                           channel_timeout=60, ident="test-as")

    def stop(signum, frame):
        (state_dir / "ready").unlink(missing_ok=True)
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    threading.Thread(target=announce_when_ready, args=(state_dir, port), daemon=True).start()
    print(f"serve.py: http://127.0.0.1:{port}/o (setup {time.monotonic() - t0:.2f}s)", file=sys.stderr,
          flush=True)
    server.run()


if __name__ == "__main__":
    main()
