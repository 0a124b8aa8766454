"""A real IMAP and submission server on loopback for the mail recipes: Dovecot (Debian's dovecot-imapd and
dovecot-submissiond) whose `oauth2` passdb checks every XOAUTH2 / OAUTHBEARER token at the test authorization
server's RFC 7662 introspection endpoint (`introspection_mode = post`, as the `introspector` client).

Dovecot runs from its own config in a private temp dir, in the foreground (`dovecot -F`), on free ports, as the
current user, or as `nobody` when the tests run as root (its login processes refuse to run as root, and an
unprivileged master needs no chroot). Submission relays to a small SMTP sink here that delivers each message into
the same user's Maildir, so a test can both see that a message was relayed and read it back over IMAP.
"""
from __future__ import annotations

import asyncio
import grp
import os
import pwd
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path

from conftest import free_port, kill_pid, pid_alive, short_tmpdir, wait_for
from test_integrations import self_signed_tls

USER = "alice@example.test"  # the mail login; the introspected `username` of the fixture's user is "alice"
SERVER_NAME = "localhost"    # in the certificate: mbsync checks DNS names only, not IP addresses

DOVECOT_CONF = """\
# Written by Tests/e2e/mailserver.py for one test run; nothing from /etc/dovecot is read.
base_dir = {base}/run
state_dir = {base}/state
instance_name = aa-mail-{port_imaps}
protocols = imap submission
listen = 127.0.0.1
hostname = {server_name}
log_path = {base}/dovecot.log
default_internal_user = {user}
default_internal_group = {group}
default_login_user = {user}
first_valid_uid = 1
first_valid_gid = 1
ssl = required
ssl_cert = <{cert}
ssl_key = <{key}
# Bearer tokens only: no password ever works here.
auth_mechanisms = xoauth2 oauthbearer
auth_verbose = yes
auth_failure_delay = 0
mail_location = maildir:{base}/mail/%n/Maildir
passdb {{
  driver = oauth2
  mechanisms = xoauth2 oauthbearer
  args = {base}/oauth2.conf.ext
}}
userdb {{
  driver = static
  args = uid={uid} gid={gid} home={base}/mail/%n
}}
service imap-login {{
  chroot =
  inet_listener imap {{
    port = 0
  }}
  inet_listener imaps {{
    port = {port_imaps}
    ssl = yes
  }}
}}
service submission-login {{
  chroot =
  inet_listener submission {{
    port = {port_submission}
  }}
}}
# An unprivileged master cannot chroot.
service anvil {{
  chroot =
}}
service ipc {{
  chroot =
}}
submission_relay_host = 127.0.0.1
submission_relay_port = {port_relay}
"""

# Introspection as the fixture's `introspector` client (HTTP Basic from the URL). DOT answers `username` = "alice";
# %Ln lower-cases and drops the domain of both it and the login name, so "alice@example.test" must match "alice".
OAUTH2_CONF = """\
introspection_mode = post
introspection_url = http://introspector:introspector-secret@127.0.0.1:{as_port}/o/introspect/
username_attribute = username
username_format = %Ln
active_attribute = active
active_value = true
"""


class Maildir:
    """The user's Maildir that Dovecot serves; the relay sink delivers here (tmp/ then rename into new/)."""

    def __init__(self, path: Path):
        self.path = path
        for sub in ("tmp", "new", "cur"):
            (path / sub).mkdir(parents=True, exist_ok=True)

    def deliver(self, message: bytes, owner: tuple[int, int] | None = None) -> Path:
        name = f"{time.time_ns()}.{os.getpid()}.{threading.get_ident()}.aa-test"
        tmp = self.path / "tmp" / name
        tmp.write_bytes(message)
        if owner:
            os.chown(tmp, *owner)
        final = self.path / "new" / name
        os.rename(tmp, final)
        return final

    def messages(self) -> list[bytes]:
        return [p.read_bytes() for sub in ("new", "cur") for p in sorted((self.path / sub).iterdir())]


class RelaySink:
    """Plain SMTP on 127.0.0.1 (no auth: only Dovecot's submission service relays here) that records each message
    and hands it to `deliver(bytes)`."""

    def __init__(self, deliver, port: int):
        self.deliver = deliver
        self.port = port
        self.messages: list[tuple[str, list[str], bytes]] = []
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def start(self):
        self.thread.start()
        coro = asyncio.start_server(self.session, "127.0.0.1", self.port)
        self.server = asyncio.run_coroutine_threadsafe(coro, self.loop).result(10)
        return self

    def stop(self):
        async def close():
            self.server.close()
            await self.server.wait_closed()
        asyncio.run_coroutine_threadsafe(close(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)

    async def session(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        async def say(text: str):
            writer.write(text.encode() + b"\r\n")
            await writer.drain()

        async def line() -> bytes:
            data = await asyncio.wait_for(reader.readline(), 30)
            if not data:
                raise ConnectionError
            return data.rstrip(b"\r\n")

        sender, recipients = "", []
        try:
            await say("220 sink.test ESMTP")
            while True:
                command = (await line()).decode(errors="replace")
                verb = command.split(" ", 1)[0].upper()
                if verb in ("EHLO", "HELO"):
                    await say("250-sink.test")
                    await say("250 8BITMIME")
                elif verb == "MAIL":
                    sender, recipients = command.split(":", 1)[1].strip().split(" ")[0], []
                    await say("250 2.1.0 OK")
                elif verb == "RCPT":
                    recipients.append(command.split(":", 1)[1].strip().split(" ")[0])
                    await say("250 2.1.5 OK")
                elif verb == "DATA":
                    await say("354 End data with <CR><LF>.<CR><LF>")
                    body = []
                    while (text := await line()) != b".":
                        body.append(text[1:] if text.startswith(b"..") else text)
                    message = b"\r\n".join(body) + b"\r\n"
                    self.deliver(message)  # first, so a test that sees the message recorded finds it delivered
                    self.messages.append((sender, recipients, message))
                    await say("250 2.0.0 delivered")
                elif verb in ("RSET", "NOOP"):
                    await say("250 OK")
                elif verb == "QUIT":
                    await say("221 2.0.0 bye")
                    break
                else:
                    await say("502 5.5.2 not implemented")
        except (ConnectionError, asyncio.TimeoutError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()


class MailServer:
    """Dovecot (IMAPS and submission with STARTTLS) in front of the auth server `auth_server`."""

    def __init__(self, auth_server):
        self.auth_server = auth_server
        self.base = short_tmpdir("aa-mail-")
        self.proc: subprocess.Popen | None = None
        self.sink: RelaySink | None = None
        # Root: run as nobody (Dovecot's login processes refuse root); otherwise as ourselves.
        account = pwd.getpwnam("nobody") if os.getuid() == 0 else pwd.getpwuid(os.getuid())
        self.uid, self.gid, self.user = account.pw_uid, account.pw_gid, account.pw_name
        self.port_imaps = self.port_submission = self.port_relay = 0
        self.cafile = ""
        self.maildir = Maildir(self.base / "mail" / USER.split("@")[0] / "Maildir")

    def start(self, timeout: float = 30):
        dovecot = shutil.which("dovecot", path="/usr/sbin:/usr/bin")
        assert dovecot, "dovecot is not installed (scripts/setup installs dovecot-imapd and dovecot-submissiond)"
        cert, key, _ = self_signed_tls(self.base, dns=(SERVER_NAME,))
        self.cafile = cert
        self.port_imaps, self.port_submission, self.port_relay = free_port(), free_port(), free_port()
        self.sink = RelaySink(lambda message: self.maildir.deliver(message, (self.uid, self.gid)), self.port_relay).start()
        group = grp.getgrgid(self.gid).gr_name
        (self.base / "dovecot.conf").write_text(DOVECOT_CONF.format(
            base=self.base, server_name=SERVER_NAME, user=self.user, group=group, uid=self.uid, gid=self.gid,
            cert=cert, key=key, port_imaps=self.port_imaps, port_submission=self.port_submission,
            port_relay=self.port_relay))
        (self.base / "oauth2.conf.ext").write_text(OAUTH2_CONF.format(as_port=self.auth_server.port))
        for path in [self.base, *self.base.rglob("*")]:
            os.chown(path, self.uid, self.gid)
        os.chmod(key, 0o600)
        self.stderr = open(self.base / "dovecot.stderr", "ab")
        self.proc = subprocess.Popen(
            [dovecot, "-F", "-c", str(self.base / "dovecot.conf")], stdin=subprocess.DEVNULL, stdout=self.stderr,
            stderr=self.stderr, start_new_session=True,
            **({"user": self.uid, "group": self.gid, "extra_groups": []} if os.getuid() == 0 else {}))
        try:
            wait_for(self._listening, timeout, "Dovecot to accept connections on its IMAPS and submission ports")
        except BaseException:
            self.stop()
            raise
        return self

    def _listening(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"dovecot exited with {self.proc.returncode}:\n{self.log()[-3000:]}"
                                 f"{(self.base / 'dovecot.stderr').read_text(errors='replace')[-2000:]}")
        for port in (self.port_imaps, self.port_submission):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
            except OSError:
                return False
        return True

    def stop(self):
        """SIGTERM to the master (it stops its children), SIGKILL after 10 s; then checks no child is left."""
        if self.proc is not None:
            children = self._children()
            kill_pid(self.proc.pid, timeout=10)
            self.proc.wait(timeout=5)
            wait_for(lambda: not any(pid_alive(pid) for pid in children), 10, "Dovecot's processes to exit")
            self.proc = None
            self.stderr.close()
        if self.sink is not None:
            self.sink.stop()
            self.sink = None

    def _children(self) -> dict[int, str]:
        """The master's child processes and their names ({pid: comm}), from /proc/PID/stat."""
        children = {}
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    stat = (entry / "stat").read_text()
                except OSError:
                    continue
                name, fields = stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 1:].split()
                if int(fields[1]) == self.proc.pid:
                    children[int(entry.name)] = name
        return children

    def kick(self):
        """Drops every IMAP and submission session of USER (`doveadm kick`), as a server restart or a network change
        would: the clients must log in again."""
        sessions = [pid for pid, name in self._children().items() if name in ("imap", "submission")]
        assert sessions, "no IMAP or submission session to kick"
        doveadm = shutil.which("doveadm", path="/usr/bin:/usr/sbin")
        out = subprocess.run([doveadm, "-c", str(self.base / "dovecot.conf"), "kick", USER], capture_output=True,
                             text=True, timeout=30)
        assert out.returncode == 0, f"doveadm kick failed ({out.returncode}): {out.stdout}{out.stderr}"
        # doveadm returns once it has signalled the sessions; a client command sent before a session has gone would
        # be answered (or lost) by it rather than find the connection closed.
        wait_for(lambda: not any(pid_alive(pid) for pid in sessions), 10, "the kicked sessions to end")

    def cleanup(self):
        shutil.rmtree(self.base, ignore_errors=True)

    # -- observation

    def log(self) -> str:
        path = self.base / "dovecot.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def logins(self, service: str, mechanism: str) -> int:
        """Successful logins of USER with `mechanism` (XOAUTH2 or OAUTHBEARER) to `service` (imap or submission)."""
        needle = f"{service}-login: Info: Login: user=<{USER}>, method={mechanism.upper()},"
        return self.log().count(needle)

    def refused_tokens(self) -> int:
        """Tokens the oauth2 passdb found inactive at the introspection endpoint (expired, revoked, unknown)."""
        return self.log().count("oauth2 failed: Introspection failed")

    def failed_logins(self, service: str) -> int:
        return sum(1 for line in self.log().splitlines()
                   if f" {service}-login: Info: Disconnected" in line and "auth failed" in line)
