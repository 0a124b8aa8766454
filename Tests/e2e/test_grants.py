"""Grants (`authctl grant`, issue 55): a socket of its own per workload, mounted into a container, that serves the
grant's accounts and nothing else, ends at once when revoked, at its time, or when the process it is tied to exits,
and outlives agent restarts and crashes while it lasts.

The containers are bwrap's with their own user, pid, mount, IPC and UTS namespaces, a root of the host's /usr and
/etc only, and nothing of the desktop's runtime directory but the grant's directory, mounted where the recipe in
docs/INTEGRATIONS.md mounts it (/run/auth-agent); and real podman, running that recipe as printed with the host's
root under an overlay for its image (scripts/setup configures podman for this machine class). Real agent, keyring
and authorization server."""
import json
import os
import re
import shutil
import socket
import subprocess

import pytest

from conftest import connection_closed, default_account, pid_alive, read_until, render_config, wait_for
from test_dpop import dpop_server, resource  # noqa: F401 (a fixture)
from test_sandbox import BWRAP, authctl_path, host_tree, library_dirs
from test_notifications import notification_server, notifications  # noqa: F401 (a fixture)
from test_wake import system_bus  # noqa: F401 (a fixture)

pytestmark = pytest.mark.release

MOUNT = "/run/auth-agent"
PODMAN = shutil.which("podman") or "/usr/bin/podman"


def container(agent, grant_dir: str, command: list[str], stdin=subprocess.DEVNULL) -> subprocess.Popen:
    """`command` in a bwrap container that sees the grant's directory at /run/auth-agent and nothing else of the
    desktop's runtime directory; AUTH_AGENT_SOCKET points at the socket, as the recipe says."""
    authctl = authctl_path(agent)
    argv = [BWRAP, "--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--die-with-parent",
            *host_tree(), "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--tmpfs", "/run", "--tmpfs", "/opt"]
    for directory in library_dirs(authctl):
        argv += ["--ro-bind", directory, directory]
    argv += ["--ro-bind", authctl, "/opt/bin/authctl", "--bind", grant_dir, MOUNT,
             "--setenv", "AUTH_AGENT_SOCKET", f"{MOUNT}/socket", "--unsetenv", "XDG_RUNTIME_DIR"]
    return subprocess.Popen([*argv, *command], env=agent.env, stdin=stdin, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def in_container(agent, grant_dir: str, *args) -> subprocess.CompletedProcess:
    proc = container(agent, grant_dir, ["/opt/bin/authctl", *args])
    out, err = proc.communicate(timeout=60)
    if proc.returncode == 0 and args and args[0] == "token":
        agent.remember(out.strip())
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def make_grant(agent, name: str, *args) -> dict:
    result = agent.authctl("grant", name, *args, "--json", timeout=20)
    assert result.returncode == 0, f"authctl grant failed ({result.returncode}): {result.stderr}"
    return json.loads(result.stdout)["grant"]


def audit(agent) -> list[dict]:
    result = agent.authctl("audit", "--json", timeout=20)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["entries"]


@pytest.fixture
def two_accounts(make_agent, keyring, auth_server):
    agent = make_agent(accounts={"work": default_account(auth_server.issuer),
                                 "personal": default_account(auth_server.issuer)})
    agent.login("work")
    agent.login("personal")
    return agent


def test_a_grant_serves_its_account_in_a_container_and_nothing_else(two_accounts):
    agent = two_accounts
    grant = make_grant(agent, "ci", "--account", "work", "--for", "1h")
    directory = os.path.dirname(grant["socket"])
    assert grant["accounts"] == ["work"] and grant["expires"] is not None
    assert os.stat(directory).st_mode & 0o777 == 0o700 and os.stat(grant["socket"]).st_mode & 0o777 == 0o600

    served = in_container(agent, directory, "token", "work")
    assert served.returncode == 0, served.stderr
    assert served.stdout.strip() == agent.token("work")

    other = in_container(agent, directory, "token", "personal")
    assert other.returncode == 7, other.stderr
    assert "grant 'ci' does not include account 'personal'" in other.stderr

    # Nothing but tokens of its accounts: no sign-in, no other account's status, no grants of its own.
    for verb in (["login", "work"], ["logout", "work"], ["reload"], ["pending"],
                 ["grant", "more", "--account", "personal"], ["grant", "--revoke", "ci"]):
        refused = in_container(agent, directory, *verb)
        assert refused.returncode != 0, f"{verb} was served through the grant"
        assert "only get tokens of the accounts it was given" in refused.stderr or "desktop" in refused.stderr, refused.stderr
    # Nor does it become another grant by naming it.
    make_grant(agent, "wide", "--account", "personal")
    switched = in_container(agent, directory, "token", "personal", "--grant", "wide")
    assert switched.returncode == 9 and "only programs of the desktop may ask as a grant" in switched.stderr, switched.stderr
    assert agent.authctl("grant", "--revoke", "wide").returncode == 0
    status = in_container(agent, directory, "status", "--json")
    assert status.returncode == 0, status.stderr
    seen = json.loads(status.stdout)
    assert [a["name"] for a in seen["accounts"]] == ["work"]
    assert seen["view"] == "grant" and seen["named_by"] == "ci"
    assert "grants" not in seen and "forwards" not in seen and seen["agent"].get("socket") is None
    assert "access" not in seen["accounts"][0], "the account's policy is the desktop's; a grant is served by its grant"

    records = [r for r in audit(agent) if r["caller"].get("grant") == "ci"]
    granted = [r for r in records if r["outcome"] == "granted"]
    denied = [r for r in records if r["outcome"] == "denied"]
    assert granted and all(r["account"] == "work" and r["reason"] == "granted" for r in granted)
    assert denied and denied[0]["account"] == "personal" and denied[0]["reason"] == "not_granted"
    caller = granted[0]["caller"]
    assert caller["kind"] == "grant" and caller["via"] == "grant:ci"
    assert caller["pid_namespace"].startswith("pid:[")  # a pid namespace of its own, as the container has
    assert caller["exe"] == "/opt/bin/authctl"  # the path in its own root: shown, never judged

    listed = agent.status_json()["grants"]
    assert [g["name"] for g in listed] == ["ci"] and listed[0]["uses"] == 1 and listed[0]["last_use"]
    human = agent.authctl("grant", "--list")
    assert human.returncode == 0 and "ci" in human.stdout and "work" in human.stdout


def test_revoke_closes_the_socket_and_its_connections_at_once(two_accounts):
    agent = two_accounts
    grant = make_grant(agent, "build", "--account", "work")
    path = grant["socket"]
    # A workload holding a connection open: through a container's process that waits on stdin between requests.
    script = ("import socket,sys,json\n"
              "s=socket.socket(socket.AF_UNIX);s.connect('/run/auth-agent/socket')\n"
              "f=s.makefile('rwb')\n"
              "for line in sys.stdin:\n"
              "    try:\n"
              "        f.write(b'{\"v\":1,\"op\":\"token\",\"account\":\"work\"}\\n');f.flush()\n"
              "        reply=f.readline()\n"
              "    except OSError:\n"
              "        reply=b''\n"
              "    print('closed' if not reply else ('ok' if b'access_token' in reply else 'error'),flush=True)\n")
    proc = container(agent, os.path.dirname(path), ["/usr/bin/python3", "-c", script], stdin=subprocess.PIPE)
    try:
        proc.stdin.write("go\n")
        proc.stdin.flush()
        assert read_until(proc.stdout, "ok", 30)
        revoked = agent.authctl("grant", "--revoke", "build")
        assert revoked.returncode == 0, revoked.stderr
        assert not os.path.exists(path)
        proc.stdin.write("again\n")
        proc.stdin.flush()
        assert "closed" in read_until(proc.stdout, "closed", 30)
    finally:
        proc.kill()
        proc.communicate(timeout=10)
    with socket.socket(socket.AF_UNIX) as s:
        with pytest.raises(OSError):
            s.connect(path)
    assert "grants" not in agent.status_json()
    again = agent.authctl("grant", "--revoke", "build")
    assert again.returncode == 9 and "no grant 'build'" in again.stderr


def test_a_grant_ends_at_its_time_and_with_the_process_it_is_tied_to(two_accounts):
    agent = two_accounts
    timed = make_grant(agent, "short", "--account", "work", "--for", "2s")
    tied_to = subprocess.Popen(["sleep", "600"])
    try:
        tied = make_grant(agent, "tied", "--account", "work", "--while-pid", str(tied_to.pid))
        assert tied["while_pid"] == tied_to.pid
        with socket.socket(socket.AF_UNIX) as held:
            held.connect(tied["socket"])
            tied_to.kill()
            tied_to.wait(timeout=10)
            wait_for(lambda: not os.path.exists(tied["socket"]), 10, "the tied grant's socket to go")
            assert connection_closed(held)
    finally:
        tied_to.kill()
    wait_for(lambda: not os.path.exists(timed["socket"]), 15, "the timed grant's socket to go at its time")
    assert "grants" not in agent.status_json()
    assert "its time is up" in agent.log() and "which it was tied to, exited" in agent.log()


def test_a_grant_outlives_an_agent_restart_and_a_crash(two_accounts):
    agent = two_accounts
    grant = make_grant(agent, "long", "--account", "work", "--for", "1h")
    directory = os.path.dirname(grant["socket"])
    # The container is up before the agent goes: its mount holds the directory, not the socket.
    proc = container(agent, directory, ["/bin/sh", "-c", "while read x; do /opt/bin/authctl token work; echo rc=$?; done"],
                     stdin=subprocess.PIPE)
    try:
        for step in ("restart", "crash"):
            if step == "restart":
                agent.restart()
            else:
                agent.kill9()
                agent.start()
            proc.stdin.write("go\n")
            proc.stdin.flush()
            out = read_until(proc.stdout, "rc=", 30)
            assert out.strip().endswith("rc=0"), f"after the agent's {step}: {out!r}"
            token = out.strip().splitlines()[-2]
            agent.remember(token)
            assert token == agent.token("work")
    finally:
        proc.kill()
        proc.communicate(timeout=10)
    assert [g["name"] for g in agent.status_json()["grants"]] == ["long"]
    assert agent.authctl("grant", "--revoke", "long").returncode == 0
    agent.restart()
    assert not os.path.exists(grant["socket"]) and "grants" not in agent.status_json()


def test_a_desktop_hook_asks_as_the_grant(two_accounts, notification_server):
    """`authctl token ACCOUNT --grant NAME`: a hook the sandbox's tool runs on the desktop gets the grant's token,
    audited as the grant; another account is refused."""
    agent = two_accounts
    make_grant(agent, "agentic", "--account", "work")
    served = agent.authctl("token", "work", "--grant", "agentic")
    assert served.returncode == 0, served.stderr
    refused = agent.authctl("token", "personal", "--grant", "agentic")
    assert refused.returncode == 7 and "does not include account 'personal'" in refused.stderr
    records = [r for r in audit(agent) if r["caller"].get("via") == "grant:agentic"]
    assert [r["outcome"] for r in records] == ["granted", "denied"]
    # A sign-in the grant needs is never started by it (no browser), and the words fit a hook on the desktop too.
    assert agent.authctl("logout", "personal").returncode == 0
    make_grant(agent, "needs", "--account", "personal")
    browsers = agent.browser_runs()
    needs = agent.authctl("token", "personal", "--grant", "needs")
    assert needs.returncode == 4 and "which a grant never starts: run `authctl login personal`" in needs.stderr
    assert agent.browser_runs() == browsers
    wait_for(lambda: any("grant needs" in n.get("body", "") for n in notifications(notification_server)), 10,
             "the desktop notification naming the grant")
    shown = [n for n in notifications(notification_server) if n.get("summary") == "Sign in to personal"]
    assert shown and "grant needs" in shown[-1]["body"], shown
    missing = agent.authctl("token", "work", "--grant", "nonesuch")
    assert missing.returncode == 3 and "grant 'nonesuch' is not served" in missing.stderr
    assert "authctl grant --list" in missing.stderr


def test_making_a_grant_is_checked(two_accounts, auth_server):
    agent = two_accounts
    unknown = agent.authctl("grant", "x", "--account", "nope")
    assert unknown.returncode == 8 and "nope" in unknown.stderr
    bad = agent.authctl("grant", "../x", "--account", "work")
    assert bad.returncode == 9 and "no grant name" in bad.stderr
    assert agent.authctl("grant", "x").returncode == 2  # no --account: a usage error
    make_grant(agent, "dup", "--account", "work")
    dup = agent.authctl("grant", "dup", "--account", "work")
    assert dup.returncode == 9 and "exists" in dup.stderr
    # An account with an access policy is granted only by a person at a terminal, not by a background program.
    agent.write_config(render_config({"work": default_account(auth_server.issuer, allowed_clients=[]),
                                      "personal": default_account(auth_server.issuer)}))
    assert agent.authctl("reload").returncode == 0
    background = agent.authctl("grant", "guarded", "--account", "work")
    assert background.returncode == 9 and "terminal" in background.stderr


def test_a_grant_narrows_its_tokens_to_its_scopes_and_never_widens_them(make_agent, keyring, auth_server):
    """`--scope` of an account with `scoped_tokens`: the grant's tokens carry only its scopes (introspected at the
    server); a request for another scope is refused and audited; a resource for an account without `scoped_tokens`
    and a scope the account lacks are refused, both before the grant exists."""
    agent = make_agent(accounts={"work": default_account(auth_server.issuer, scoped_tokens=True),
                                 "plain": default_account(auth_server.issuer)})
    agent.login("work")
    agent.remember(keyring.secret_tool_lookup("work", auth_server.issuer))
    grant = make_grant(agent, "narrow", "--account", "work", "--scope", "openid")
    assert grant["scopes"] == ["openid"]
    directory = os.path.dirname(grant["socket"])

    served = in_container(agent, directory, "token", "work")
    assert served.returncode == 0, served.stderr
    token = served.stdout.strip()
    info = auth_server.introspect(token)
    assert info["active"] is True and info["scope"].split() == ["openid"], info
    agent.remember(keyring.secret_tool_lookup("work", auth_server.issuer))
    again = in_container(agent, directory, "token", "work", "--scope", "openid")
    assert again.returncode == 0 and again.stdout.strip() == token, "the same narrowed token, cached"

    wider = in_container(agent, directory, "token", "work", "--scope", "email")
    assert wider.returncode == 7 and wider.stdout == "", wider
    assert "grant 'narrow' serves the scopes openid only, not the scopes email" in wider.stderr
    [denied] = [r for r in audit(agent) if r["caller"].get("grant") == "narrow" and r["outcome"] == "denied"]
    assert denied["reason"] == "scope_not_granted" and denied["scopes"] == ["email"], denied
    listed = agent.authctl("grant", "--list")
    assert "work (scopes openid)" in listed.stdout, listed.stdout

    resource = agent.authctl("grant", "wide", "--account", "plain", "--resource", "https://api.example.com/")
    assert resource.returncode == 9 and "cannot serve account 'plain' as asked" in resource.stderr
    assert "scoped_tokens = true" in resource.stderr, resource.stderr
    lacking = agent.authctl("grant", "admin", "--account", "work", "--scope", "admin")
    assert lacking.returncode == 9 and "does not have the scope admin" in lacking.stderr, lacking.stderr
    assert [g["name"] for g in agent.status_json().get("grants", [])] == ["narrow"]


def test_a_narrower_grant_of_an_account_its_server_would_shrink_signs_in_on_its_own(make_agent, keyring, auth_server):
    """Django OAuth Toolkit narrows a refresh token for good when a refresh asks for fewer scopes, so a narrower grant
    of an account without `scoped_tokens` gets a sign-in of its own (the browser, once, as `authctl login`): its
    token has only the grant's scopes (introspected), the account's own token keeps all of its scopes, and revoking
    the grant revokes that sign-in at the server and deletes it from the keyring."""
    agent = make_agent()
    agent.login("work")
    agent.remember(keyring.secret_tool_lookup("work", auth_server.issuer))
    made = agent.authctl("grant", "own", "--account", "work", "--scope", "openid", timeout=60)
    assert made.returncode == 0, made.stderr
    assert "for grant 'own'" in made.stderr and "sign-in: its own for work" in made.stdout, made
    own = keyring.secret_tool_lookup("work@grant:own", auth_server.issuer)
    assert own, "the grant's sign-in is kept in the keyring like any other"
    agent.remember(own)
    [grant] = agent.status_json()["grants"]
    assert grant["own_sign_ins"] == ["work"] and grant["scopes"] == ["openid"]
    assert [a["name"] for a in agent.status_json()["accounts"]] == ["work"], "the grant's sign-in is not an account"

    served = in_container(agent, os.path.dirname(grant["socket"]), "token", "work")
    assert served.returncode == 0, served.stderr
    token = served.stdout.strip()
    info = auth_server.introspect(token)
    assert info["active"] is True and info["scope"].split() == ["openid"], info
    # After a restart the grant's sign-in is found again in the keyring (a new token from its refresh token), still
    # narrow.
    agent.restart()
    again = in_container(agent, os.path.dirname(grant["socket"]), "token", "work")
    assert again.returncode == 0, again.stderr
    agent.remember(again.stdout.strip(), keyring.secret_tool_lookup("work@grant:own", auth_server.issuer))
    assert auth_server.introspect(again.stdout.strip())["scope"].split() == ["openid"]
    mine = agent.authctl("token", "work", "--refresh")
    assert mine.returncode == 0, mine.stderr
    agent.remember(mine.stdout.strip(), keyring.secret_tool_lookup("work", auth_server.issuer))
    assert sorted(auth_server.introspect(mine.stdout.strip())["scope"].split()) == ["email", "offline_access", "openid"]

    revoked = agent.authctl("grant", "--revoke", "own")
    assert revoked.returncode == 0, revoked.stderr
    wait_for(lambda: auth_server.introspect(again.stdout.strip())["active"] is False, timeout=15,
             what="the grant's sign-in revoked at the server with the grant")
    wait_for(lambda: keyring.secret_tool_count("work@grant:own") == 0, timeout=15, what="and deleted from the keyring")
    assert auth_server.introspect(mine.stdout.strip())["active"] is True, "the account's own sign-in is untouched"


def test_a_grants_tokens_are_revoked_at_its_max_ttl(make_agent, keyring, auth_server):
    """`--max-ttl`: the grant's tokens come from a sign-in of its own, are served as expiring by then, and each is
    revoked at the server at that age (introspected inactive); the next request gets a new one; the account's own
    token lives on."""
    agent = make_agent()
    agent.login("work")
    mine = agent.token("work")
    agent.remember(keyring.secret_tool_lookup("work", auth_server.issuer))
    made = agent.authctl("grant", "brief", "--account", "work", "--max-ttl", "15s", "--json", timeout=60)
    assert made.returncode == 0, made.stderr
    grant = json.loads(made.stdout)["grant"]
    assert grant["max_ttl"] == 15 and grant["own_sign_ins"] == ["work"] and "scopes" not in grant, grant
    agent.remember(keyring.secret_tool_lookup("work@grant:brief", auth_server.issuer))
    directory = os.path.dirname(grant["socket"])

    served = in_container(agent, directory, "token", "work", "--json")
    assert served.returncode == 0, served.stderr
    reply = json.loads(served.stdout)
    token = reply["access_token"]
    agent.remember(token)
    assert 10 <= reply["expires_in"] <= 15, reply
    assert auth_server.introspect(token)["active"] is True
    wait_for(lambda: auth_server.introspect(token)["active"] is False, timeout=30, what="the token revoked at its max-ttl")
    again = in_container(agent, directory, "token", "work")
    assert again.returncode == 0, again.stderr
    agent.remember(again.stdout.strip(), keyring.secret_tool_lookup("work@grant:brief", auth_server.issuer))
    assert again.stdout.strip() != token and auth_server.introspect(again.stdout.strip())["active"] is True
    assert auth_server.introspect(mine)["active"] is True, "the account's own token is not the grant's"
    listed = agent.authctl("grant", "--list")
    assert "each revoked after 15s" in listed.stdout, listed.stdout


def test_a_server_that_ignores_the_narrower_scope_is_not_served_wider(make_agent, keyring, auth_server):
    """A server that drops `scope` from a refresh (GitHub's documented refresh request has none) answers with all of
    the sign-in's scopes: through a grant that narrows them, that token is refused and audited, never handed out."""
    from faultproxy import FaultProxy
    import quirkproxy

    proxy = FaultProxy(auth_server.base).start()
    try:
        agent = make_agent(work={"token_endpoint": proxy.base + "/o/token/", "scoped_tokens": True})
        agent.login("work")
        agent.remember(keyring.secret_tool_lookup("work", auth_server.issuer))
        proxy.quirk(quirkproxy.github_refresh_without_scope)
        grant = make_grant(agent, "narrow", "--account", "work", "--scope", "openid")
        refused = in_container(agent, os.path.dirname(grant["socket"]), "token", "work")
        agent.remember(keyring.secret_tool_lookup("work", auth_server.issuer))
        assert refused.returncode == 7 and refused.stdout == "", refused
        assert "wider than grant 'narrow'" in refused.stderr, refused.stderr
        [denied] = [r for r in audit(agent) if r["caller"].get("grant") == "narrow"]
        assert denied["outcome"] == "denied" and denied["reason"] == "scope_not_granted", denied
    finally:
        proxy.stop()


def test_a_grant_signs_dpop_proofs_only_for_its_urls(make_agent, keyring, dpop_server):
    """`--dpop-url`: a proof for a listed URL is served and the resource server accepts it; one for another URL or
    method is refused and audited; a grant of a Bearer account cannot be confined this way."""
    agent = make_agent(server=dpop_server)
    agent.login("work")
    assert agent.account_status("work")["dpop"] == "access_token"
    api = f"{dpop_server.base}/api/resource"
    grant = make_grant(agent, "tool", "--account", "work", "--dpop-url", f"GET {dpop_server.base}/api")
    assert grant["dpop_urls"] == [f"GET {dpop_server.base}/api"]
    directory = os.path.dirname(grant["socket"])

    def proof(*extra):
        served = in_container(agent, directory, "token", "work", "--header", "--url", api, *extra)
        assert served.returncode == 0, served.stderr
        agent.remember(*(line.split(" ", 2)[-1] for line in served.stdout.splitlines()))
        return served.stdout

    # The resource asks for its own nonce first (401 + DPoP-Nonce); the proof made with it passes.
    first = resource(dpop_server, proof())
    status, nonce = first.status_code, first.headers.get("DPoP-Nonce")
    assert status == 401 and nonce
    status = resource(dpop_server, proof(f"--dpop-nonce={nonce}")).status_code
    assert status == 200

    for extra in (["--url", f"{dpop_server.base}/o/userinfo/"], ["--method", "POST", "--url", api],
                  ["--url", f"{dpop_server.base}/api/../o/token/"]):
        refused = in_container(agent, directory, "token", "work", "--header", *extra)
        assert refused.returncode == 7, (extra, refused.stderr)
        assert "has DPoP proofs signed only for GET" in refused.stderr and refused.stdout == ""
    denied = [r for r in audit(agent) if r["caller"].get("grant") == "tool" and r["outcome"] == "denied"]
    assert [r["reason"] for r in denied] == ["proof_not_granted"] * 3
    assert denied[0]["dpop_proof_for"] == f"GET {dpop_server.base}/o/userinfo/"

    bad = agent.authctl("grant", "loose", "--account", "work", "--dpop-url", f"{dpop_server.base}/api/../x")
    assert bad.returncode == 9 and "'..' segments" in bad.stderr


def test_a_bearer_account_cannot_be_confined_to_urls(two_accounts):
    refused = two_accounts.authctl("grant", "tool", "--account", "work", "--dpop-url", "https://api.example.com/")
    assert refused.returncode == 9 and "does not have DPoP-bound access tokens" in refused.stderr


def test_a_socket_activated_agent_stays_while_a_grant_lasts(make_agent, keyring):
    """Under socket activation with `idle_exit`, the agent does not exit idle while a grant lasts (systemd holds the
    agent's own socket, not the grant's: an exit would leave the container nothing to connect to); revoked, it exits
    idle as usual."""
    agent = make_agent(start=False, agent={"idle_exit": 2})
    with agent.socket_activated(("XDG_RUNTIME_DIR", "XDG_CONFIG_HOME", "DBUS_SESSION_BUS_ADDRESS", "HOME")):
        grant = make_grant(agent, "held", "--account", "work")
        pid = agent.status_json()["agent"]["pid"]
        wait_for(lambda: "idle, but grants are served" in agent.log(), 20, "the idle exit to be held off")
        assert pid_alive(pid) and os.path.exists(grant["socket"])
        assert agent.authctl("grant", "--revoke", "held").returncode == 0
        wait_for(lambda: not pid_alive(pid), 60, "the agent to exit idle once the grant was revoked")
        assert "idle; exiting until the next connection" in agent.log()


def test_what_locks_with_the_session_is_refused_while_it_is_locked(make_agent, keyring, auth_server, system_bus):
    """`lock_with_session = true` on an account and `--lock-with-session` on a grant: refused while logind's hint
    says the display session is locked (a fake logind on a private system bus: tests/Fixtures/systembus), and while
    `authctl lock` says so (lockers that set no hint); what does not lock with the session is served throughout."""
    system_bus.start_services(network_manager=False)
    agent = make_agent(accounts={"work": default_account(auth_server.issuer, lock_with_session=True),
                                 "personal": default_account(auth_server.issuer)}, env=system_bus.env)
    wait_for(lambda: "following the display session's lock" in agent.log(), 20, "the agent to follow the session lock")
    agent.login("work")
    agent.login("personal")
    make_grant(agent, "locking", "--account", "personal", "--lock-with-session")
    make_grant(agent, "plain", "--account", "personal")

    def served() -> dict:
        return {name: agent.authctl("token", *args).returncode
                for name, args in (("work", ["work"]), ("personal", ["personal"]),
                                   ("locking", ["personal", "--grant", "locking"]), ("plain", ["personal", "--grant", "plain"]))}

    everything = {"work": 0, "personal": 0, "locking": 0, "plain": 0}
    assert served() == everything
    system_bus.emit("lock", 1)
    wait_for(lambda: "the session is locked (logind)" in agent.log(), 20, "the agent to see logind's lock")
    assert served() == {"work": 7, "personal": 0, "locking": 7, "plain": 0}
    refused = agent.authctl("token", "work")
    assert "account 'work' is not served while your session is locked" in refused.stderr
    assert agent.status_json()["agent"]["session_locked"] == "the screen locker (logind)"
    assert "locked:  by the screen locker (logind)" in agent.authctl("status").stdout
    system_bus.emit("lock", 0)
    wait_for(lambda: "the session is not locked (logind)" in agent.log(), 20, "the agent to see logind's unlock")
    assert served() == everything

    # A locker that sets no hint: authctl lock before it, authctl unlock after it.
    locked = agent.authctl("lock")
    assert locked.returncode == 0 and "locked by `authctl lock`" in locked.stdout
    assert served() == {"work": 7, "personal": 0, "locking": 7, "plain": 0}
    assert agent.authctl("unlock").returncode == 0
    assert served() == everything
    assert "session_locked" not in agent.status_json()["agent"]
    reasons = [r["reason"] for r in audit(agent) if r["outcome"] == "denied"]
    assert reasons == ["session_locked"] * 5


def test_a_container_that_writes_its_grants_directory_gains_nothing(two_accounts):
    """A workload given the grant's directory writable (bwrap's --bind, podman without :ro) leaves a file in it and
    puts a link to the desktop's own socket where the grant's socket was. The desktop's hook that asks as the grant
    is still served as the grant (it asks the agent, not that path); and once the grant ends, a new grant of the same
    name gets a new directory, which the old mount does not reach."""
    agent = two_accounts
    grant = make_grant(agent, "ci", "--account", "work")
    directory = os.path.dirname(grant["socket"])
    script = ("cd /run/auth-agent && echo left > keep && rm socket && ln -s ../../agent.sock socket && echo swapped; "
              "while read x; do /opt/bin/authctl token work; echo rc=$?; done")
    proc = container(agent, directory, ["/bin/sh", "-c", script], stdin=subprocess.PIPE)
    try:
        assert "swapped" in read_until(proc.stdout, "swapped", 30)
        assert os.path.islink(grant["socket"])
        hook = agent.authctl("token", "personal", "--grant", "ci")
        assert hook.returncode == 7 and "grant 'ci' does not include account 'personal'" in hook.stderr, hook.stderr
        served = agent.authctl("token", "work", "--grant", "ci")
        assert served.returncode == 0, served.stderr
        assert [r["outcome"] for r in audit(agent) if r["caller"].get("via") == "grant:ci"] == ["denied", "granted"]

        assert agent.authctl("grant", "--revoke", "ci").returncode == 0
        assert not os.path.exists(directory) or not os.path.exists(os.path.join(directory, "keep"))
        again = make_grant(agent, "ci", "--account", "work", "--account", "personal")
        assert again["socket"] == grant["socket"] and os.listdir(directory) == ["socket"]
        text, rc = answer(proc, "old mount")
        assert rc != 0 and "access_token" not in text, f"the old mount reached the new grant: {text!r}"
        fresh = in_container(agent, directory, "token", "personal")
        assert fresh.returncode == 0, fresh.stderr
    finally:
        proc.kill()
        proc.communicate(timeout=10)
    assert not [n for n in os.listdir(os.path.dirname(directory)) if n.startswith(".ended-")], "nothing left aside"


def podman(agent, grant_dir: str, command: list[str], cidfile, stdin=subprocess.DEVNULL) -> subprocess.Popen:
    """The podman recipe of docs/INTEGRATIONS.md as printed, with `--rootfs /:O` where it has IMAGE (the host's root
    under a throwaway overlay: no image to pull, and this machine reaches no registry) and `--cidfile` to learn the
    container's id. Podman 4.3's `--rootfs` is a flag whose root is the first argument, so it goes last."""
    assert os.access(PODMAN, os.X_OK), "podman is not installed: run scripts/setup (apt-get install podman runc)"
    argv = [PODMAN, "run", "--rm", "--network", "none", "-v", f"{grant_dir}:{MOUNT}:ro",
            "-e", f"AUTH_AGENT_SOCKET={MOUNT}/socket", "-v", f"{authctl_path(agent)}:/usr/local/bin/authctl:ro",
            "--cidfile", str(cidfile), *(["-i"] if stdin == subprocess.PIPE else []), "--rootfs", "/:O", *command]
    return subprocess.Popen(argv, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def answer(proc, line: str) -> tuple[str, int]:
    """Sends `line` to a container's `while read` loop; its output up to and including `rc=N`, and N."""
    proc.stdin.write(line + "\n")
    proc.stdin.flush()
    text = read_until(proc.stdout, "rc=", 30)
    while not re.search(r"rc=\d+\n", text):
        text += read_until(proc.stdout, "\n", 30)
    return text, int(re.search(r"rc=(\d+)\n", text).group(1))


def test_the_podman_recipe_serves_the_grant_audited_with_the_container_and_revoked_mid_use(two_accounts, tmp_path):
    agent = two_accounts
    grant = make_grant(agent, "pod", "--account", "work", "--for", "1h")
    directory = os.path.dirname(grant["socket"])

    # The recipe's own command, once: the token is the desktop's.
    run = podman(agent, directory, ["authctl", "token", "work"], tmp_path / "first.cid")
    out, err = run.communicate(timeout=60)
    assert run.returncode == 0, f"podman run of the recipe failed ({run.returncode}): {err.strip()}"
    token = out.strip()
    agent.remember(token)
    assert token == agent.token("work")
    first = (tmp_path / "first.cid").read_text().strip()

    # A container that stays up and asks when told: another account, refused; its own; revoked; its own again.
    loop = podman(agent, directory, ["sh", "-c", 'while read a; do authctl token "$a"; echo rc=$?; done'],
                  tmp_path / "loop.cid", stdin=subprocess.PIPE)
    try:
        _, rc = answer(loop, "personal")
        assert rc == 7
        second = (tmp_path / "loop.cid").read_text().strip()
        running = subprocess.run([PODMAN, "ps", "--no-trunc", "--format", "{{.ID}}"], capture_output=True, text=True,
                                 timeout=30)
        assert second in running.stdout.split(), f"podman ps: {running.stdout!r} {running.stderr!r}"
        text, rc = answer(loop, "work")
        assert rc == 0 and text.splitlines()[0] == token
        revoked = agent.authctl("grant", "--revoke", "pod")
        assert revoked.returncode == 0, revoked.stderr
        _, rc = answer(loop, "work")
        assert rc != 0
        loop.stdin.close()
        loop.wait(timeout=30)
        err = loop.stderr.read()
    finally:
        loop.kill()
        loop.wait(timeout=30)
    assert "grant 'pod' does not include account 'personal'" in err, err
    assert loop.returncode == 0, err

    records = [r for r in audit(agent) if r["caller"].get("via") == "grant:pod"]
    assert [(r["account"], r["outcome"]) for r in records] == \
        [("work", "granted"), ("personal", "denied"), ("work", "granted")], records
    # The container's id, as podman has it, from the caller's cgroup (`/libpod_parent/libpod-ID` with the cgroupfs
    # manager): each request names its own container.
    assert [r["caller"].get("container") for r in records] == \
        [f"podman {first[:12]}", f"podman {second[:12]}", f"podman {second[:12]}"], records
    for record in records:
        caller = record["caller"]
        assert caller["kind"] == "grant" and caller["grant"] == "pod"
        assert caller["pid_namespace"].startswith("pid:[")
        assert caller["exe"] == "/usr/local/bin/authctl"
