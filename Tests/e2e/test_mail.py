"""The mail recipes of docs/INTEGRATIONS.md as printed, run by the real clients from Debian (msmtp, mbsync with
Debian's XOAUTH2 SASL plugin, neomutt in batch mode and on a pseudo-terminal, aerc on a pseudo-terminal, curl)
against a real Dovecot on loopback (mailserver.py) whose oauth2 passdb checks each token at the test authorization
server. Tokens live LIFETIME seconds: a client runs once, then again after every access token issued so far has
expired at the server, so the agent must have refreshed; the running neomutt and aerc see their connection dropped
after that.

Each config block comes from docs/INTEGRATIONS.md (readme_blocks.py); only the placeholders it names are replaced. What
the test adds is the environment a user's machine has and this one lacks: trust in the test server's certificate
(SSL_CERT_FILE / CURL_CA_BUNDLE for OpenSSL clients, a config line for GnuTLS ones) and `authctl` on PATH."""
from __future__ import annotations

import email
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from conftest import REPO, SYSTEM_PATH, AuthServer, bin_dir, default_account, wait_for
from mailserver import USER, MailServer
from readme_blocks import fill_in, recipe_block
from terminal import drive
from test_notifications import notification_server, notifications  # noqa: F401 (fixture)

pytestmark = pytest.mark.release  # also run against the installed package (scripts/test)

# Where the recipes live (one line to change if they move).
RECIPES, SECTION = REPO / "docs" / "INTEGRATIONS.md", "## Mail"
ACCOUNT = "gmail"  # the recipes' account name, so `authctl token gmail` runs as printed
LIFETIME = 15      # seconds an access token lives at the test authorization server


def recipe(label: str, mail_server: MailServer, nth: int = 0) -> str:
    """The block after `label`, with the placeholders the recipes name replaced; none may be left over (a recipe that
    grew a new example value must not quietly send the test to the real Gmail)."""
    block = fill_in(recipe_block(RECIPES, SECTION, label, nth), {
        "alice%40gmail.com": USER.replace("@", "%40"), "alice@gmail.com": USER,
        "imap.gmail.com": "localhost", "smtp.gmail.com": "localhost",
        "993": str(mail_server.port_imaps), "587": str(mail_server.port_submission),
    })
    assert "gmail.com" not in block, f"an example value the recipes do not name as a placeholder:\n{block}"
    return block


@pytest.fixture(scope="module")
def mail_auth_server(tmp_path_factory):
    server = AuthServer(tmp_path_factory.mktemp("mail-authserver"), lifetime=LIFETIME)
    server.start()
    yield server
    server.stop()


@pytest.fixture
def mail_server(mail_auth_server):
    server = MailServer(mail_auth_server).start()
    yield server
    server.stop()
    log = server.log()
    server.cleanup()
    assert not any(secret in log for secret in mail_auth_server.issued_secrets()), "a token in Dovecot's log"


@pytest.fixture
def mail_agent(make_agent, keyring, mail_auth_server):
    """An agent whose account `gmail` is signed in at the short-lived-token server."""
    server = mail_auth_server
    # The fixture server registers /oauth2/callback/work as a redirect URI.
    agent = make_agent(server=server, accounts={ACCOUNT: default_account(server.issuer,
                                                                         redirect_path="/oauth2/callback/work")})
    agent.login(ACCOUNT)
    agent.remember(keyring.secret_tool_lookup(ACCOUNT, server.issuer))
    return agent


def client_env(agent, mail_server: MailServer) -> dict:
    return dict(agent.env, PATH=f"{bin_dir()}:{SYSTEM_PATH}", SSL_CERT_FILE=mail_server.cafile,
                CURL_CA_BUNDLE=mail_server.cafile)


def installed(program: str) -> str:
    assert shutil.which(program, path=SYSTEM_PATH), f"{program} is not installed (scripts/setup installs it)"
    return program


def run(agent, mail_server, args, input: bytes | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    installed(args[0])
    # No controlling terminal, whatever runs the tests: as from cron or a systemd timer.
    result = subprocess.run(args, env=client_env(agent, mail_server), cwd=agent.home, input=input,
                            stdin=None if input is not None else subprocess.DEVNULL, capture_output=True,
                            timeout=timeout, start_new_session=True)
    output = result.stdout + result.stderr
    assert not any(secret.encode() in output for secret in mail_server.auth_server.issued_secrets()), \
        f"{args[0]} printed a token (output withheld)"
    return result


def explain(result: subprocess.CompletedProcess, mail_server: MailServer) -> str:
    return (f"exit {result.returncode}\nstdout: {result.stdout.decode(errors='replace')[-1500:]}\n"
            f"stderr: {result.stderr.decode(errors='replace')[-1500:]}\ndovecot.log:\n{mail_server.log()[-2500:]}")


def wait_until_every_token_expired(server: AuthServer):
    """Waits (bounded) until the server calls every token it has issued so far inactive."""
    issued = server.issued_secrets()
    wait_for(lambda: not any(server.introspect(t).get("active") for t in issued), LIFETIME + 15,
             "every access token issued so far to expire at the authorization server", interval=0.5)


def logged(condition):
    """Dovecot's log process writes the lines of its login processes a moment after they happen: wait for them."""
    wait_for(condition, 10, "the line in Dovecot's log")


def message(subject: str) -> bytes:
    return (f"From: {USER}\r\nTo: bob@example.test\r\nSubject: {subject}\r\n"
            f"Message-ID: <{time.time_ns()}@example.test>\r\n\r\nsent by a README recipe\r\n").encode()


def subjects(raw_messages) -> list[str]:
    return [email.message_from_bytes(raw)["Subject"] for raw in raw_messages]


def twice(agent, mail_server, attempt):
    """Runs `attempt(round)` once, then again after every token issued so far has expired; the agent must have
    asked the server for a new one in between."""
    attempt(1)
    posts = mail_server.auth_server.token_posts()
    wait_until_every_token_expired(mail_server.auth_server)
    attempt(2)
    assert mail_server.auth_server.token_posts() > posts, "the second round used a refreshed token"


# ----------------------------------------------------------------------------------------------------------------
# msmtp


def write_msmtprc(agent, mail_server, block: str):
    path = agent.home / ".msmtprc"
    # msmtp uses GnuTLS, which reads no environment variable for trust: a `defaults` section ahead of the recipe.
    path.write_text(f"defaults\ntls_trust_file {mail_server.cafile}\n\n{block}")
    path.chmod(0o600)


@pytest.mark.parametrize("mechanism", ["xoauth2", "oauthbearer"])
def test_msmtp_recipe_submits_through_dovecot(mail_agent, mail_server, mechanism):
    block = recipe("**msmtp**", mail_server)
    if mechanism == "oauthbearer":  # docs/INTEGRATIONS.md: "`auth oauthbearer` works the same"
        block = block.replace("auth xoauth2\n", "auth oauthbearer\n")
        assert "auth oauthbearer\n" in block
    write_msmtprc(mail_agent, mail_server, block)

    def attempt(round):
        logins = mail_server.logins("submission", mechanism)
        result = run(mail_agent, mail_server, ["msmtp", "-a", ACCOUNT, "bob@example.test"],
                     input=message(f"msmtp {mechanism} round {round}"))
        assert result.returncode == 0, explain(result, mail_server)
        logged(lambda: mail_server.logins("submission", mechanism) == logins + 1)
        sender, recipients, _ = mail_server.sink.messages[-1]
        assert (sender, recipients) == (f"<{USER}>", ["<bob@example.test>"])
        assert f"msmtp {mechanism} round {round}" in subjects(mail_server.maildir.messages())

    if mechanism == "xoauth2":
        twice(mail_agent, mail_server, attempt)
    else:
        attempt(1)


def test_msmtp_fails_when_dovecot_refuses_the_token(mail_agent, mail_server, mail_auth_server):
    """The negative control: Dovecot really checks the token (here: the agent's token, but for another user)."""
    block = recipe("**msmtp**", mail_server).replace(f"user {USER}\n", "user bob@example.test\n")
    write_msmtprc(mail_agent, mail_server, block)
    result = run(mail_agent, mail_server, ["msmtp", "-a", ACCOUNT, "bob@example.test"], input=message("refused"))
    assert result.returncode != 0
    logged(lambda: mail_server.failed_logins("submission") == 1)
    assert not mail_server.sink.messages


# ----------------------------------------------------------------------------------------------------------------
# mbsync (isync) with Debian's Cyrus SASL XOAUTH2 plugin


def write_mbsyncrc(agent, mail_server) -> Path:
    """The recipe's ~/.mbsyncrc and the folder it says to make; returns the local INBOX that `mbsync gmail` fills."""
    (agent.home / ".mbsyncrc").write_text(recipe("**mbsync / isync**", mail_server))
    (agent.home / "Mail" / ACCOUNT).mkdir(parents=True)  # docs/INTEGRATIONS.md: mkdir -p ~/Mail/gmail
    return agent.home / "Mail" / ACCOUNT / "INBOX"


def synced_subjects(inbox: Path) -> list[str]:
    return subjects([path.read_bytes() for sub in ("new", "cur") if (inbox / sub).is_dir()
                     for path in (inbox / sub).iterdir()])


def test_mbsync_recipe_syncs_the_inbox(mail_agent, mail_server):
    local = write_mbsyncrc(mail_agent, mail_server)

    def attempt(round):
        mail_server.maildir.deliver(message(f"mbsync round {round}"), (mail_server.uid, mail_server.gid))
        logins = mail_server.logins("imap", "XOAUTH2")
        result = run(mail_agent, mail_server, ["mbsync", ACCOUNT])
        assert result.returncode == 0, explain(result, mail_server)
        logged(lambda: mail_server.logins("imap", "XOAUTH2") == logins + 1)
        assert f"mbsync round {round}" in synced_subjects(local)

    twice(mail_agent, mail_server, attempt)


# ----------------------------------------------------------------------------------------------------------------
# curl over IMAP


def test_curl_recipe_fetches_a_message_over_imap(mail_agent, mail_server):
    line = recipe("**curl**", mail_server)
    installed("curl")
    mail_server.maildir.deliver(message("curl over imap"), (mail_server.uid, mail_server.gid))

    def attempt(round):
        logins = sum(mail_server.logins("imap", m) for m in ("XOAUTH2", "OAUTHBEARER"))
        result = run(mail_agent, mail_server, ["sh", "-c", line])
        assert result.returncode == 0, explain(result, mail_server)
        logged(lambda: sum(mail_server.logins("imap", m) for m in ("XOAUTH2", "OAUTHBEARER")) == logins + 1)
        assert email.message_from_bytes(result.stdout)["Subject"] == "curl over imap"

    twice(mail_agent, mail_server, attempt)


# ----------------------------------------------------------------------------------------------------------------
# neomutt: sending in batch mode (no terminal), reading the inbox on a pseudo-terminal


def write_neomuttrc(agent, mail_server):
    (agent.home / ".neomuttrc").write_text(recipe("**neomutt**", mail_server))


def neomutt_args(mail_server) -> list[str]:
    # neomutt uses GnuTLS, which reads no environment variable for trust; -n: no system-wide neomuttrc.
    return ["neomutt", "-n", "-e", f"set ssl_ca_certificates_file = '{mail_server.cafile}'"]


def test_neomutt_recipe_sends_in_batch_mode(mail_agent, mail_server):
    write_neomuttrc(mail_agent, mail_server)

    def attempt(round):
        logins = mail_server.logins("submission", "XOAUTH2")
        result = run(mail_agent, mail_server, [*neomutt_args(mail_server), "-s", f"neomutt round {round}",
                                               "bob@example.test"], input=b"sent by neomutt in batch mode\n")
        assert result.returncode == 0, explain(result, mail_server)
        logged(lambda: mail_server.logins("submission", "XOAUTH2") == logins + 1)
        assert f"neomutt round {round}" in subjects(mail_server.maildir.messages())

    twice(mail_agent, mail_server, attempt)


def test_neomutt_recipe_opens_the_imap_inbox(mail_agent, mail_server):
    write_neomuttrc(mail_agent, mail_server)

    def attempt(round):
        subject = f"neomutt imap round {round}"
        mail_server.maildir.deliver(message(subject), (mail_server.uid, mail_server.gid))
        logins = mail_server.logins("imap", "XOAUTH2")
        screen = on_terminal(mail_agent, mail_server, neomutt_args(mail_server), [(subject, b"q")])
        assert subject in screen
        logged(lambda: mail_server.logins("imap", "XOAUTH2") == logins + 1)

    twice(mail_agent, mail_server, attempt)


def on_terminal(agent, mail_server, args: list[str], steps: list[tuple], timeout: float = 30,
                env: dict | None = None, status: int = 0) -> str:
    """terminal.drive with the client environment; a failure shows Dovecot's log too."""
    installed(args[0])
    return drive(args, dict(client_env(agent, mail_server), **(env or {})), agent.home, steps, timeout,
                 context=lambda: f"dovecot.log:\n{mail_server.log()[-2000:]}", status=status)


# ----------------------------------------------------------------------------------------------------------------
# aerc (a terminal program: on a pseudo-terminal)


def write_aerc_config(agent, mail_server):
    config = agent.config_home / "aerc"  # ~/.config/aerc: the agent's environment sets XDG_CONFIG_HOME
    config.mkdir()
    (config / "accounts.conf").write_text(recipe("**aerc**", mail_server))
    (config / "accounts.conf").chmod(0o600)  # aerc refuses a readable accounts.conf


def test_aerc_recipe_opens_the_imap_inbox(mail_agent, mail_server):
    write_aerc_config(mail_agent, mail_server)
    subject = "aerc imap"
    mail_server.maildir.deliver(message(subject), (mail_server.uid, mail_server.gid))
    logins = mail_server.logins("imap", "XOAUTH2")
    on_terminal(mail_agent, mail_server, ["aerc"], [(subject, b":quit\r")])
    logged(lambda: mail_server.logins("imap", "XOAUTH2") == logins + 1)


def test_aerc_recipe_sends_over_submission(mail_agent, mail_server):
    """aerc 0.14 runs outgoing-cred-cmd when it sends (here: after every token issued while it started expired);
    the recipe's smtp-starttls line is what makes port 587 work."""
    write_aerc_config(mail_agent, mail_server)
    logins = mail_server.logins("submission", "XOAUTH2")
    # mailto: opens the composer; EDITOR=true leaves the body as given and goes straight to the review screen.
    on_terminal(mail_agent, mail_server, ["aerc", "mailto:bob@example.test?subject=aerc%20send&body=hi"],
                [("Send this email", lambda: wait_until_every_token_expired(mail_server.auth_server) or b"y"),
                 (lambda: mail_server.sink.messages, b":quit\r")], env={"EDITOR": "true"}, timeout=LIFETIME + 45)
    logged(lambda: mail_server.logins("submission", "XOAUTH2") == logins + 1)
    assert "aerc send" in subjects(mail_server.maildir.messages())


# ----------------------------------------------------------------------------------------------------------------
# A signed-out account: the mail client hides authctl's message, so the desktop notification must tell the user


def test_signed_out_account_shows_one_desktop_notification_when_mail_clients_ask(
        make_agent, keyring, mail_auth_server, mail_server, notification_server):
    server = mail_auth_server
    agent = make_agent(server=server, accounts={
        ACCOUNT: default_account(server.issuer, redirect_path="/oauth2/callback/work"),
        "other": default_account(server.issuer)})
    write_msmtprc(agent, mail_server, recipe("**msmtp**", mail_server))
    write_mbsyncrc(agent, mail_server)
    write_neomuttrc(agent, mail_server)
    # neomutt shows authctl's message for a moment, then "Unable to open mailbox" over it.
    on_terminal(agent, mail_server, neomutt_args(mail_server), [("Unable to open mailbox", b"q")])
    # Background requests, the way mail clients make them: no terminal, authctl's stderr unseen by the user.
    for args, input in ((["msmtp", "-a", ACCOUNT, "bob@example.test"], message("not sent")),
                        (["mbsync", ACCOUNT], None),
                        (["msmtp", "-a", ACCOUNT, "bob@example.test"], message("not sent either"))):
        result = run(agent, mail_server, args, input=input)
        assert result.returncode != 0, explain(result, mail_server)
    assert not mail_server.sink.messages and "Login:" not in mail_server.log()
    wait_for(lambda: notifications(notification_server), 10, "the sign-in notification")
    assert [(n["summary"], n["actions"]) for n in notifications(notification_server)] == [
        (f"Sign in to {ACCOUNT}", ["sign-in", "Sign in"])]
    assert f"authctl login {ACCOUNT}" in notifications(notification_server)[0]["body"]
    # One more background request: the agent remembers it told the user. Then a request for another signed-out
    # account, whose notification comes after any (wrong) second one for the first account would have.
    assert run(agent, mail_server, ["mbsync", ACCOUNT]).returncode != 0
    assert agent.authctl("token", "other").returncode == 4
    wait_for(lambda: len(notifications(notification_server)) >= 2, 10, "the other account's notification")
    assert [n["summary"] for n in notifications(notification_server)] == [f"Sign in to {ACCOUNT}", "Sign in to other"]


def test_aerc_cannot_log_in_again_after_its_token_expired(mail_agent, mail_server):
    """Documented: aerc 0.14 runs source-cred-cmd once, at start-up. After the token expired and the server dropped the
    connection, aerc logs in again with the token it kept, and Dovecot refuses it."""
    write_aerc_config(mail_agent, mail_server)
    mail_server.maildir.deliver(message("aerc before"), (mail_server.uid, mail_server.gid))

    def expire_and_kick():
        wait_until_every_token_expired(mail_server.auth_server)
        mail_server.kick()
        return b""

    on_terminal(mail_agent, mail_server, ["aerc"], [
        ("aerc before", expire_and_kick),
        (lambda: mail_server.refused_tokens() >= 1, b":quit\r"),
    ], timeout=LIFETIME + 60)
    assert mail_server.logins("imap", "XOAUTH2") == 1


def test_neomutt_logs_in_again_with_a_fresh_token_after_the_server_dropped_it(mail_agent, mail_server):
    """Documented: neomutt runs its refresh command at every login. The running neomutt, its token expired and its
    connection dropped by the server, logs in again with a new token from the agent."""
    write_neomuttrc(mail_agent, mail_server)
    mail_server.maildir.deliver(message("neomutt before"), (mail_server.uid, mail_server.gid))

    def expire_and_kick():
        wait_until_every_token_expired(mail_server.auth_server)
        mail_server.kick()
        return b":exec imap-fetch-mail\r"  # talks to the server: neomutt finds the connection gone

    on_terminal(mail_agent, mail_server, neomutt_args(mail_server), [
        ("neomutt before", expire_and_kick),
        (lambda: mail_server.logins("imap", "XOAUTH2") == 2, b"q"),
    ], timeout=LIFETIME + 60)
    assert mail_server.refused_tokens() == 0

