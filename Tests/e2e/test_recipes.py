"""README's recipes, driven through the real programs: curl with `authctl token --header` against a server that
checks the bearer token at the authorization server's introspection endpoint; real msmtp with `passwordeval`
sending through a local SMTP server (written here) that requires AUTH XOAUTH2 or OAUTHBEARER and checks the token
the same way; and mbsync's `PassCmd`, which must print exactly the token."""
from __future__ import annotations

import asyncio
import base64
import json
import shutil
import subprocess
import threading

import pytest

from conftest import SYSTEM_PATH, bin_dir, default_account
from test_integrations import CheckingServer, git_server, parse_basic, run_git

pytestmark = pytest.mark.release  # also run against the installed package (scripts/test)



def authctl_path() -> str:
    return str(bin_dir() / "authctl")


# ----------------------------------------------------------------------------------------------------------------
# curl


def test_curl_takes_the_header_from_authctl_on_stdin(signed_in_agent, auth_server):
    def check(header):
        return header.startswith("Bearer ") and auth_server.introspect(header[7:]).get("active") is True

    with CheckingServer(check, {"/api/me": ("application/json", b'{"ok":true}\n')}, 'Bearer realm="api"') as server:
        # The README line, as a user types it.
        line = f"'{authctl_path()}' token work --header | curl -sS --fail -H @- {server.base}/api/me"
        result = subprocess.run(["sh", "-c", line], env=signed_in_agent.env, capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        assert result.stdout == '{"ok":true}\n'
        assert len(server.authorizations()) == 1
        token = server.authorizations()[0].removeprefix("Bearer ")
    signed_in_agent.remember(token)
    assert token == signed_in_agent.token("work")


# ----------------------------------------------------------------------------------------------------------------
# A small SMTP server that wants OAuth 2.0 (RFC 7628 OAUTHBEARER, Google/Microsoft XOAUTH2)


class OAuthSMTPServer:
    """SMTP on 127.0.0.1:0 in a thread. AUTH XOAUTH2 / OAUTHBEARER only; `check(user, token) -> bool` decides.
    Records the AUTH mechanisms used, the users and tokens offered, and each accepted message."""

    def __init__(self, check):
        self.check = check
        self.auths: list[tuple[str, str, str]] = []  # (mechanism, user, token)
        self.messages: list[tuple[str, list[str], str]] = []
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.port = 0

    def __enter__(self):
        self.thread.start()
        server = asyncio.run_coroutine_threadsafe(asyncio.start_server(self.session, "127.0.0.1", 0), self.loop).result(10)
        self.server = server
        self.port = server.sockets[0].getsockname()[1]
        return self

    def __exit__(self, *exc):
        async def close():
            self.server.close()
            await self.server.wait_closed()
        asyncio.run_coroutine_threadsafe(close(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)

    @staticmethod
    def parse(mechanism: str, blob: bytes) -> tuple[str, str]:
        text = blob.decode()
        if mechanism == "XOAUTH2":  # user=U^Aauth=Bearer T^A^A
            fields = dict(part.split("=", 1) for part in text.split("\x01") if "=" in part)
            return fields.get("user", ""), fields.get("auth", "").removeprefix("Bearer ")
        gs2, _, rest = text.partition("\x01")  # OAUTHBEARER: n,a=U,^Ahost=...^Aauth=Bearer T^A^A
        user = next((p[2:] for p in gs2.split(",") if p.startswith("a=")), "")
        fields = dict(part.split("=", 1) for part in rest.split("\x01") if "=" in part)
        return user, fields.get("auth", "").removeprefix("Bearer ")

    async def session(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        async def say(line: str):
            writer.write(line.encode() + b"\r\n")
            await writer.drain()

        async def line() -> str:
            data = await asyncio.wait_for(reader.readline(), 30)
            if not data:
                raise ConnectionError
            return data.decode(errors="replace").rstrip("\r\n")

        authed = False
        sender, recipients = "", []
        try:
            await say("220 test.local ESMTP ready")
            while True:
                command = await line()
                verb = command.split(" ", 1)[0].upper()
                if verb in ("EHLO", "HELO"):
                    await say("250-test.local")
                    await say("250-AUTH XOAUTH2 OAUTHBEARER")
                    await say("250 8BITMIME")
                elif verb == "AUTH":
                    parts = command.split(" ")
                    mechanism = parts[1].upper() if len(parts) > 1 else ""
                    if mechanism not in ("XOAUTH2", "OAUTHBEARER"):
                        await say("504 5.5.4 only XOAUTH2 and OAUTHBEARER")
                        continue
                    if len(parts) > 2:
                        initial = parts[2]
                    else:
                        await say("334 ")
                        initial = await line()
                    user, token = self.parse(mechanism, base64.b64decode(initial))
                    self.auths.append((mechanism, user, token))
                    if self.check(user, token):
                        authed = True
                        await say("235 2.7.0 Authentication successful")
                    else:
                        await say("334 " + base64.b64encode(b'{"status":"401","schemes":"bearer"}').decode())
                        await line()  # the client's empty response
                        await say("535 5.7.8 Authentication credentials invalid")
                elif verb == "MAIL":
                    if not authed:
                        await say("530 5.7.0 Authentication required")
                        continue
                    sender, recipients = command.split(":", 1)[1].strip(), []
                    await say("250 2.1.0 OK")
                elif verb == "RCPT":
                    recipients.append(command.split(":", 1)[1].strip())
                    await say("250 2.1.5 OK")
                elif verb == "DATA":
                    await say("354 End data with <CR><LF>.<CR><LF>")
                    body = []
                    while (text := await line()) != ".":
                        body.append(text[1:] if text.startswith("..") else text)
                    self.messages.append((sender, recipients, "\n".join(body)))
                    await say("250 2.0.0 queued")
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


def msmtp_config(path, port: int, mechanism: str) -> None:
    """README's msmtp recipe, pointed at the local server (no TLS on loopback in this test)."""
    path.write_text(f"""defaults
logfile -

account work
host 127.0.0.1
port {port}
tls off
auth {mechanism}
user alice@example.test
from alice@example.test
passwordeval "'{authctl_path()}' token work"

account default : work
""")
    path.chmod(0o600)


@pytest.mark.parametrize("mechanism", ["xoauth2", "oauthbearer"])
def test_msmtp_sends_with_the_agents_token(signed_in_agent, auth_server, tmp_path, mechanism):
    msmtp = shutil.which("msmtp", path=SYSTEM_PATH)
    assert msmtp, "msmtp is not installed (scripts/setup installs it)"

    def check(user, token):
        return user == "alice@example.test" and auth_server.introspect(token).get("active") is True

    config = tmp_path / "msmtprc"
    with OAuthSMTPServer(check) as server:
        msmtp_config(config, server.port, mechanism)
        message = "From: alice@example.test\nTo: bob@example.test\nSubject: hello\n\nsent with an OAuth token\n"
        result = subprocess.run([msmtp, "-C", str(config), "bob@example.test"], input=message, env=signed_in_agent.env,
                                capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, f"msmtp failed: {result.stdout}{result.stderr}"
        assert [a[:2] for a in server.auths] == [(mechanism.upper(), "alice@example.test")]
        token = server.auths[0][2]
        assert len(server.messages) == 1
        sender, recipients, body = server.messages[0]
        assert "<alice@example.test>" in sender and recipients == ["<bob@example.test>"]
        assert "sent with an OAuth token" in body
    signed_in_agent.remember(token)
    assert token == signed_in_agent.token("work")
    assert token not in result.stdout + result.stderr


def test_msmtp_fails_when_the_token_is_refused(signed_in_agent, auth_server, tmp_path):
    config = tmp_path / "msmtprc"
    with OAuthSMTPServer(lambda user, token: False) as server:
        msmtp_config(config, server.port, "xoauth2")
        result = subprocess.run(["msmtp", "-C", str(config), "bob@example.test"], input="Subject: x\n\nx\n",
                                env=dict(signed_in_agent.env, PATH=SYSTEM_PATH), capture_output=True, text=True, timeout=60)
        assert result.returncode != 0
        assert len(server.auths) == 1 and not server.messages


def test_mbsync_passcmd_prints_exactly_the_token(signed_in_agent, auth_server):
    """mbsync runs PassCmd through the shell and takes its stdout (one trailing newline stripped) as the password."""
    passcmd = f"'{authctl_path()}' token work"
    result = subprocess.run(["sh", "-c", passcmd], env=signed_in_agent.env, capture_output=True, timeout=30)
    assert result.returncode == 0 and result.stderr == b""
    assert result.stdout.count(b"\n") == 1 and result.stdout.endswith(b"\n")
    token = result.stdout[:-1].decode()
    signed_in_agent.remember(token)
    assert token.isprintable() and " " not in token
    assert auth_server.introspect(token)["active"] is True


# ----------------------------------------------------------------------------------------------------------------
# git: one helper line for several hosts (git_hosts)


def test_one_git_helper_line_serves_several_hosts_through_git_hosts(make_agent, auth_server):
    with git_server(auth_server) as first, git_server(auth_server) as second, git_server(auth_server) as unlisted:
        host = lambda server: server.base.removeprefix("http://")
        agent = make_agent(accounts={
            "work": default_account(auth_server.issuer, git_hosts=[host(first)]),
            "personal": default_account(auth_server.issuer, git_hosts=[f"{host(second)}/repo.git", "example.invalid"]),
        })
        agent.login("work")
        agent.login("personal")
        listed = {a["name"]: a.get("git_hosts") for a in json.loads(agent.authctl("accounts", "--json").stdout)["accounts"]}
        assert listed == {"work": [host(first)], "personal": [f"{host(second)}/repo.git", "example.invalid"]}
        helper = f"!'{authctl_path()}' git-credential"
        common = ["-c", "credential.helper=", "-c", f"credential.helper={helper}", "-c", "credential.useHttpPath=true"]
        for server in (first, second):
            result = run_git(agent, *common, "ls-remote", f"{server.base}/repo.git")
            assert result.returncode == 0, result.stderr
        missing = run_git(agent, *common, "ls-remote", f"{unlisted.base}/repo.git")
        assert missing.returncode != 0
        assert f"authctl: no account lists {host(unlisted)}/repo.git in its git_hosts" in missing.stderr
        assert not unlisted.authorizations(), "no token goes to a host no account lists"
        tokens = {name: agent.token(name) for name in ("work", "personal")}
        assert parse_basic(first.authorizations()[-1])[1] == tokens["work"]
        assert parse_basic(second.authorizations()[-1])[1] == tokens["personal"]
