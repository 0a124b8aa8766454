"""Tokens on the hosts you SSH into (issue 45): `authctl forward HOST [ssh arguments]` through real OpenSSH servers
on loopback (sshserver.py: two sshd with different host keys standing for `hosta` and `hostb`), the real ssh client,
the real agent, keyring and authorization server. The remote command is the real authctl, run by sshd with sshd's
environment: no XDG_RUNTIME_DIR, SSH_CONNECTION set, AUTH_AGENT_SOCKET only where the server accepts it (hosta).

What it shows: a host is named `ssh:HOST` with the key ssh was shown (audit `via`, `host_key`); its rule serves it and
not the other host; an account without allowed_clients asks about it, and a new host key is asked about again; the
session's socket serves only its ssh and is gone when ssh exits, and a dropped session's stale socket does not stop
the next; a bare `ssh -R` of the agent's socket is refused as an unknown forward; a host may get tokens and nothing
else (no login, approve or status of other accounts); a sign-in it needs is refused there with exit 4."""
import glob
import json
import os
import socket
import subprocess

import pytest

from conftest import default_account, read_until, render_config, short_tmpdir, wait_for
from sshserver import SSH, SSHHosts
from test_dpop import dpop_server, resource  # noqa: F401 (a fixture)
from test_identity import audit, run_in_terminal
from test_integrations import CheckingServer, git_server, kubectl_with_v1_exec, self_signed_tls
from test_sandbox import sandbox_agent, set_allowed_clients  # noqa: F401 (a fixture)
from test_notifications import notification_server, notifications  # noqa: F401 (a fixture)

pytestmark = pytest.mark.release  # a few ssh sessions each; also against the installed package


@pytest.fixture(scope="module")
def hosts():
    base = short_tmpdir("aa-ssh-")
    hosts = SSHHosts(base)
    yield hosts
    hosts.stop()


@pytest.fixture
def forward_agent(sandbox_agent):
    """An agent signed in to `work`, whose consent questions wait 60 s: the sandbox tests' own."""
    return sandbox_agent


def remote_authctl(agent) -> str:
    return str(agent.bins / "authctl")


def forward(agent, hosts, host, *remote, timeout=60) -> subprocess.CompletedProcess:
    """`authctl forward HOST -F CONFIG REMOTE...`: ssh's exit status is authctl's."""
    return agent.authctl("forward", host, "-F", str(hosts.config), *remote, timeout=timeout)


def forward_popen(agent, hosts, host, *remote) -> subprocess.Popen:
    return agent.authctl_popen("forward", host, "-F", str(hosts.config), *remote)


def answer_the_question(agent, waiting: subprocess.Popen, *answer: str, check=None) -> subprocess.CompletedProcess:
    """Waits until the forwarded request `waiting` asks, checks its one pending question with `check`, answers it in
    a terminal on the desktop (`authctl APPROVE-OR-DENY [--this-run] ID`) and returns how the remote side ended."""
    try:
        said = read_until(waiting.stderr, "in a terminal", 30)
        assert "in a terminal on the computer where the agent runs (not here)" in said, said
        [pending] = json.loads(agent.authctl("pending", "--json").stdout)["requests"]
        if check:
            check(pending)
        rc, output = run_in_terminal(agent, *answer, str(pending["id"]))
        assert rc == 0, output
        out, err = waiting.communicate(timeout=30)
        if waiting.returncode == 0:
            agent.remember(out.strip())
        return subprocess.CompletedProcess(waiting.args, waiting.returncode, out, output + err)
    finally:
        if waiting.poll() is None:
            waiting.kill()
            waiting.wait()


def forward_sockets(agent) -> list[str]:
    return glob.glob(str(agent.runtime / "auth-agent" / "forward-*.sock"))


def test_a_host_gets_a_token_through_its_forward_named_by_its_host_key(forward_agent, hosts, auth_server):
    agent = forward_agent
    set_allowed_clients(agent, auth_server, ["ssh:hosta"])
    result = forward(agent, hosts, "hosta", remote_authctl(agent), "token", "work")
    assert result.returncode == 0, result.stderr + hosts["hosta"].log()[-2000:]
    token = result.stdout.strip()
    agent.remember(token)
    assert auth_server.introspect(token)["active"] is True
    entry = audit(agent)[-1]
    assert (entry["outcome"], entry["reason"]) == ("granted", "listed"), entry
    assert entry["caller"]["via"] == "ssh:hosta", entry
    assert entry["caller"]["host_key"] == hosts["hosta"].fingerprint, entry
    assert entry["caller"]["exe"].endswith("/ssh"), "the local end of a forward is the ssh client"
    assert "ssh:hosta" in agent.authctl("audit").stdout

    # The other host, through the discovery rule (its sshd accepts no AUTH_AGENT_SOCKET), is not served by hosta's rule.
    refused = forward(agent, hosts, "hostb", remote_authctl(agent), "token", "work")
    assert refused.returncode == 7 and refused.stdout == "", refused.stderr
    assert 'add "ssh:hostb"' in refused.stderr, refused.stderr
    entry = audit(agent)[-1]
    assert (entry["outcome"], entry["reason"], entry["caller"]["via"]) == ("denied", "not_listed", "ssh:hostb"), entry
    assert entry["caller"]["host_key"] == hosts["hostb"].fingerprint

    # A rule pinned to another key does not serve the host; pinned to its own key, it does.
    set_allowed_clients(agent, auth_server, [f"ssh:hosta@{hosts['hostb'].fingerprint}"])
    assert forward(agent, hosts, "hosta", remote_authctl(agent), "token", "work").returncode == 7
    set_allowed_clients(agent, auth_server, [f"ssh:hosta@{hosts['hosta'].fingerprint}"])
    pinned = forward(agent, hosts, "hosta", remote_authctl(agent), "token", "work")
    assert pinned.returncode == 0, pinned.stderr
    agent.remember(pinned.stdout.strip())
    wait_for(lambda: forward_sockets(agent) == [], 10, "every session's socket to be removed after its ssh exited")


def test_an_account_without_a_policy_asks_about_a_host_and_again_when_its_key_changed(forward_agent, hosts):
    agent = forward_agent
    assert agent.token("work"), "a program on this computer is served as before"

    def approve_next_request():
        def check(pending):
            assert pending["account"] == "work", pending
            assert pending["client"] == f"ssh:hosta@{hosts['hosta'].fingerprint}", pending
            assert pending["caller"]["via"] == "ssh:hosta" and pending["caller"]["remote_program"] == "/usr/bin/timeout"
            shown = agent.authctl("pending").stdout
            assert f"host hosta over ssh (host key {hosts['hosta'].fingerprint}) running /usr/bin/timeout (said by the host, " \
                "not verified) local ssh pid" in shown, shown

        # Run by another program on the host (timeout, standing for git or a mail client): the host says which.
        waiting = forward_popen(agent, hosts, "hosta", "timeout", "50", remote_authctl(agent), "token", "work")
        result = answer_the_question(agent, waiting, "approve", check=check)
        assert result.returncode == 0 and "Allowed" in result.stderr, result.stderr

    approve_next_request()
    again = forward(agent, hosts, "hosta", remote_authctl(agent), "token", "work")
    assert again.returncode == 0, "the decision is remembered for the host and its key: " + again.stderr
    agent.remember(again.stdout.strip())
    assert audit(agent)[-1]["reason"] == "approved"

    # The host now shows another key (which the user accepted in known_hosts): a new host, asked again.
    hosts.rekey("hosta")
    approve_next_request()


def test_a_sessions_socket_serves_its_ssh_only_and_is_gone_when_ssh_exits(forward_agent, hosts, auth_server):
    agent = forward_agent
    set_allowed_clients(agent, auth_server, ["ssh:hosta"])
    # The remote side waits until the test lets it go (its stdin closes): the session stays open meanwhile.
    session = subprocess.Popen([str(agent.bins / "authctl"), "forward", "hosta", "-F", str(hosts.config),
                                "sh", "-c", "'read line; exec \"$0\" token work'", remote_authctl(agent)],
                               env=agent.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    try:
        wait_for(lambda: any(f.get("host_key") for f in agent.status_json().get("forwards") or []), 30,
                 "the forward to report its host key")
        [listed] = agent.status_json()["forwards"]
        assert (listed["host"], listed["host_key"]) == ("hosta", hosts["hosta"].fingerprint), listed
        assert "hosta" in agent.authctl("forward", "--list").stdout
        assert f"forwarded to:  hosta, host key {hosts['hosta'].fingerprint}" in agent.authctl("status").stdout
        [path] = forward_sockets(agent)
        assert oct(os.stat(path).st_mode & 0o777) == oct(0o600)

        # Another local process, the user's own, is refused on that socket.
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as intruder:
            intruder.settimeout(10)
            intruder.connect(path)
            # Refused as it connects: the agent says why and closes, before any request.
            reply = json.loads(intruder.makefile().readline())
        assert reply["error"]["code"] == "permission_denied", reply
        assert "serves the ssh session to hosta only" in reply["error"]["message"]

        out, err = session.communicate(input="go\n", timeout=30)
        assert session.returncode == 0, err
        agent.remember(out.strip())
    finally:
        if session.poll() is None:
            session.kill()
            session.wait()
    # authctl has exited with ssh; the agent ends the session when it sees authctl's connection close.
    wait_for(lambda: not os.path.exists(path), 10, "the session's socket to be removed after its ssh exited")
    assert not agent.status_json().get("forwards")


def test_a_dropped_sessions_stale_socket_does_not_block_the_next(forward_agent, hosts, auth_server):
    agent = forward_agent
    set_allowed_clients(agent, auth_server, ["ssh:hostb"])
    # What a dropped session leaves on the host (in its /tmp): a socket file nobody listens on, newer than any other.
    stale = str(hosts["hostb"].tmp / "auth-agent-forward-0000stale.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as dead:
        dead.bind(stale)
    os.chmod(stale, 0o600)
    try:
        for _ in range(2):
            result = forward(agent, hosts, "hostb", remote_authctl(agent), "token", "work")
            assert result.returncode == 0, result.stderr
            agent.remember(result.stdout.strip())
    finally:
        os.unlink(stale)


def test_a_bare_ssh_R_of_the_agents_socket_is_refused_as_an_unknown_forward(forward_agent, hosts):
    agent = forward_agent
    remote = "/tmp/auth-agent-bare-test.sock"
    if os.path.exists(remote):
        os.unlink(remote)
    result = subprocess.run([SSH, "-F", str(hosts.config), "-o", "ExitOnForwardFailure=yes",
                             "-R", f"{remote}:{agent.socket_path}", "hosta",
                             f"AUTH_AGENT_SOCKET={remote} {remote_authctl(agent)} token work; rc=$?; rm -f {remote}; exit $rc"],
                            env=agent.env, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert result.returncode == 7 and result.stdout == "", result.stderr
    assert "authctl forward" in result.stderr, result.stderr
    entry = audit(agent)[-1]
    assert (entry["outcome"], entry["reason"], entry["caller"]["via"]) == ("denied", "unknown_forward", "ssh:unknown-host")
    doctor = json.loads(agent.authctl("doctor", "--json", timeout=60).stdout)
    [check] = [c for c in doctor["checks"] if c["check"] == "forwards"]
    assert check["status"] == "warn" and "authctl forward HOST" in check["hint"], check


def test_a_host_gets_tokens_and_nothing_else(forward_agent, hosts, auth_server, notification_server):
    agent = forward_agent
    set_allowed_clients(agent, auth_server, ["ssh:hosta"])
    login = forward(agent, hosts, "hosta", remote_authctl(agent), "login", "work")
    assert login.returncode == 9 and "may only get tokens" in login.stderr, login.stderr
    approve = forward(agent, hosts, "hosta", remote_authctl(agent), "approve", "1")
    assert approve.returncode == 9 and "may only get tokens" in approve.stderr, approve.stderr
    nested = forward(agent, hosts, "hosta", remote_authctl(agent), "forward", "--stop", "hosta")
    assert nested.returncode == 9 and "may only get tokens" in nested.stderr, nested.stderr
    status = forward(agent, hosts, "hosta", remote_authctl(agent), "status", "--json")
    assert status.returncode == 0, status.stderr
    shown = json.loads(status.stdout)
    assert [a["name"] for a in shown["accounts"]] == ["work"] and "forwards" not in shown

    # An account the host was not given is not shown to it; one it was given but not signed in to is signed in to
    # here, not there: exit 4, saying where.
    agent.write_config(render_config({"work": default_account(auth_server.issuer, allowed_clients=["ssh:hosta"]),
                                      "other": default_account(auth_server.issuer),
                                      "fresh": default_account(auth_server.issuer, allowed_clients=["ssh:hosta"])},
                                     {"consent_timeout": 60}))
    assert agent.authctl("reload", timeout=20).returncode == 0
    status = forward(agent, hosts, "hosta", remote_authctl(agent), "status", "--json")
    assert sorted(a["name"] for a in json.loads(status.stdout)["accounts"]) == ["fresh", "work"]
    fresh = forward(agent, hosts, "hosta", remote_authctl(agent), "token", "fresh")
    assert fresh.returncode == 4, fresh.stderr
    assert "happens on the computer where the agent runs" in fresh.stderr, fresh.stderr
    # The desktop is told who asked, and no browser opens unasked.
    wait_for(lambda: any("hosta" in n["body"] for n in notifications(notification_server)), 10,
             "the notification naming the host")
    named = [n for n in notifications(notification_server) if "hosta" in n["body"]][-1]
    assert named["summary"] == "Sign in to fresh", named
    assert f"host hosta over ssh (host key {hosts['hosta'].fingerprint})" in named["body"], named
    assert "authctl login fresh" in named["body"] and "http" not in named["body"]
    assert agent.browser_runs() == 1, "a host's request never opens a browser (the one run is the fixture's sign-in)"


def host_with_two_accounts(agent, auth_server):
    """`work` (signed in) and `fresh` (not) serve hosta; `other` does not."""
    agent.write_config(render_config({"work": default_account(auth_server.issuer, allowed_clients=["ssh:hosta"]),
                                      "fresh": default_account(auth_server.issuer, allowed_clients=["ssh:hosta"]),
                                      "other": default_account(auth_server.issuer)}, {"consent_timeout": 60}))
    assert agent.authctl("reload", timeout=20).returncode == 0


def test_doctor_on_a_host_says_it_is_a_forward_and_what_to_do_there(forward_agent, hosts, auth_server):
    """Issue 54, item 5: on a host, `doctor` failed (`fail diagnose`, exit 1) with hints that cannot work there
    (`authctl login --no-browser`, `authctl accounts add`). There it says what the host is to the agent, which
    accounts it may use, that the agent answers, and what to do."""
    agent = forward_agent
    desktop = socket.gethostname()
    host_with_two_accounts(agent, auth_server)

    doctor = forward(agent, hosts, "hosta", remote_authctl(agent), "doctor")
    said = doctor.stdout + doctor.stderr
    assert doctor.returncode == 0, said
    lines = {line.split()[1]: line for line in doctor.stdout.splitlines() if line[:4] in ("ok  ", "warn", "fail", "skip")}
    assert f"a host reached through `authctl forward` from {desktop}, named ssh:hosta in allowed_clients" in lines["view"], said
    assert "signed in; `authctl token work` gets its tokens here" in lines["work:"], said
    assert f"hint: sign in on {desktop} (the computer where the agent runs): `authctl login fresh`" in said, said
    assert "other" not in said, "an account that does not serve the host is not named"
    assert "diagnose" not in said and "--no-browser" not in said and "accounts add" not in said, said


def test_status_and_forward_list_on_a_host_say_it_is_a_forward(forward_agent, hosts, auth_server):
    """Issue 54, item 6: on a host, `status` showed the desktop's socket path and keyring, and `forward --list` printed
    "no forwards are open" (exit 0) though forwards are the desktop's."""
    agent = forward_agent
    desktop = socket.gethostname()
    host_with_two_accounts(agent, auth_server)
    listed = forward(agent, hosts, "hosta", remote_authctl(agent), "forward", "--list")
    assert listed.returncode == 9 and "no forwards are open" not in listed.stdout, listed.stdout + listed.stderr
    assert f"forwards are opened and listed on {desktop} (the computer where the agent runs), not from this host" \
        in listed.stderr, listed.stderr
    assert agent.authctl("forward", "--list").stdout.strip() == "no forwards are open", "the desktop's own list"

    status = forward(agent, hosts, "hosta", remote_authctl(agent), "status")
    assert status.returncode == 0, status.stderr
    assert f" on {desktop}, up " in status.stdout.splitlines()[0], status.stdout
    assert "seen as: a host reached through `authctl forward`" in status.stdout, status.stdout
    assert str(agent.socket_path) not in status.stdout and "keyring:" not in status.stdout, status.stdout
    shown = json.loads(forward(agent, hosts, "hosta", remote_authctl(agent), "status", "--json").stdout)
    assert (shown["view"], shown["named_by"]) == ("ssh_host", "ssh:hosta"), shown
    assert not {"pid", "socket", "keyring", "store"} & shown["agent"].keys(), shown["agent"]


def test_git_kubectl_and_a_dpop_proof_on_the_host_go_through_the_forward(forward_agent, hosts, auth_server, make_agent,
                                                                        dpop_server):
    agent = forward_agent
    set_allowed_clients(agent, auth_server, ["ssh:hosta"])
    authctl = remote_authctl(agent)

    # git on the host, with authctl as its credential helper, against a server that checks the token.
    with git_server(auth_server) as server:
        script = hosts.base / "git.sh"
        script.write_text(
            "export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null GIT_TERMINAL_PROMPT=0 GIT_ASKPASS=\n"
            f"exec git -c credential.helper= -c \"credential.{server.base}.helper=!'{authctl}' git-credential"
            f" --account work\" ls-remote {server.base}/repo.git\n")
        result = forward(agent, hosts, "hosta", "sh", str(script))
        assert result.returncode == 0, result.stderr
        assert "refs/heads/main" in result.stdout
    git_entry = audit(agent)[-1]
    assert (git_entry["outcome"], git_entry["caller"]["via"]) == ("granted", "ssh:hosta"), git_entry

    # kubectl's exec plugin on the host: its ExecCredential comes through the forward.
    kube = forward(agent, hosts, "hosta", authctl, "kube-credential", "work", "--access-token")
    assert kube.returncode == 0, kube.stderr
    credential = json.loads(kube.stdout)
    assert credential["kind"] == "ExecCredential" and credential["status"]["token"], credential
    agent.remember(credential["status"]["token"])
    assert auth_server.introspect(credential["status"]["token"])["active"] is True

    # A DPoP proof made on the desktop (the key never leaves it) for a request the host makes.
    dpop_agent = make_agent(server=dpop_server, work={"allowed_clients": ["ssh:hosta"]})
    dpop_agent.login("work")
    url = f"{dpop_server.base}/api/resource"
    first = forward(dpop_agent, hosts, "hosta", str(dpop_agent.bins / "authctl"), "token", "work", "--header",
                    "--method", "GET", "--url", url)
    assert first.returncode == 0, first.stderr
    dpop_agent.remember(*(line.split(" ", 2)[-1] for line in first.stdout.splitlines()))
    asked = resource(dpop_server, first.stdout)
    assert asked.status_code == 401 and "use_dpop_nonce" in asked.headers.get("WWW-Authenticate", ""), asked.text
    # curl on the host, as a user types it there, with the resource's nonce.
    script = hosts.base / "curl.sh"
    script.write_text(f'exec curl -sS -H @<("{dpop_agent.bins / "authctl"}" token work --header --url "{url}"'
                      f' --dpop-nonce="{asked.headers["DPoP-Nonce"]}") "{url}"\n')
    curl = forward(dpop_agent, hosts, "hosta", "bash", str(script))
    assert curl.returncode == 0 and json.loads(curl.stdout).get("user") == "alice", (curl.stdout, curl.stderr)
    entry = audit(dpop_agent)[-1]
    assert (entry["caller"]["via"], entry["dpop_proof_for"]) == ("ssh:hosta", f"GET {url}"), entry


def test_a_server_that_refuses_socket_forwarding_or_a_host_without_authctl_says_so(forward_agent, hosts):
    agent = forward_agent
    refused = forward(agent, hosts, "nofwd", remote_authctl(agent), "token", "work")
    assert refused.returncode == 255 and refused.stdout == "", refused.stderr
    assert "remote port forwarding failed" in refused.stderr, refused.stderr
    assert "AllowStreamLocalForwarding" in refused.stderr, refused.stderr
    wait_for(lambda: forward_sockets(agent) == [], 10, "the refused session's socket to be removed")
    # A host without authctl: the remote shell's own answer and status.
    missing = forward(agent, hosts, "hosta", "/nonexistent/authctl", "token", "work")
    assert missing.returncode == 127 and "/nonexistent/authctl" in missing.stderr, missing.stderr
    # No agent here.
    no_agent = agent.authctl("forward", "hosta", "-F", str(hosts.config), "true",
                             env={"AUTH_AGENT_SOCKET": str(agent.base / "nothing.sock")})
    assert no_agent.returncode == 3, no_agent.stderr
    # Without ssh on PATH.
    no_ssh = agent.authctl("forward", "hosta", env={"PATH": "/nonexistent"})
    assert no_ssh.returncode == 1 and "ssh is not installed" in no_ssh.stderr, no_ssh.stderr


def test_allow_this_run_serves_one_ssh_session(forward_agent, hosts):
    """`authctl approve --this-run`: this ssh session only, remembered nowhere; the next session is asked again."""
    agent = forward_agent
    script = hosts.base / "twice.sh"
    # One session, two requests: the second is served on the first's answer.
    script.write_text(f'"{remote_authctl(agent)}" token work >/dev/null && exec "{remote_authctl(agent)}" token work\n')
    waiting = forward_popen(agent, hosts, "hosta", "sh", str(script))

    def check(pending):
        assert pending["run"] == "this ssh session", pending
        assert "--this-run" in agent.authctl("pending").stdout

    served = answer_the_question(agent, waiting, "approve", "--this-run", check=check)
    assert served.returncode == 0 and "for this run only" in served.stderr, served.stderr
    assert [e["reason"] for e in audit(agent)[-2:]] == ["approved", "approved"]

    # The next session asks again: nothing was remembered.
    again = forward_popen(agent, hosts, "hosta", remote_authctl(agent), "token", "work")
    assert answer_the_question(agent, again, "deny").returncode == 7


def test_forward_stop_ends_a_forward_and_the_ssh_session_goes_on(forward_agent, hosts, auth_server):
    agent = forward_agent
    set_allowed_clients(agent, auth_server, ["ssh:hosta"])
    # The remote side: one token, then (after the test's go) another, which the stopped forward no longer serves.
    script = hosts.base / "stop.sh"
    script.write_text(f'"{remote_authctl(agent)}" token work >/dev/null || exit 20\n'
                      f'echo first-served\nread line\n"{remote_authctl(agent)}" token work\necho "second: $?"\n')
    proc = subprocess.Popen([str(agent.bins / "authctl"), "forward", "hosta", "-F", str(hosts.config), "sh", str(script)],
                            env=agent.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        read_until(proc.stdout, "first-served", 30)
        [socket_path] = forward_sockets(agent)
        stopped = agent.authctl("forward", "--stop", "hosta")
        assert stopped.returncode == 0 and "stopped 1 forward to hosta" in stopped.stdout, stopped.stderr
        assert "stay valid until they expire" in stopped.stdout
        wait_for(lambda: not os.path.exists(socket_path), 10, "the stopped forward's socket to be removed")
        assert not agent.status_json().get("forwards")
        out, err = proc.communicate(input="go\n", timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err  # the ssh session went on to its end
    assert "second: 0" not in out and "second: " in out, out
    assert "the forward to hosta was stopped; this ssh session goes on without it" in err, err
    again = agent.authctl("forward", "--stop", "hosta")
    assert again.returncode == 1 and "no forward to hosta is open" in again.stderr


def test_real_kubectl_on_a_host_gets_its_token_through_the_forward(forward_agent, hosts, auth_server):
    """kubectl on the host runs authctl as its exec credential plugin, which finds the forward. Needs a kubectl that
    speaks ExecCredential v1 (Debian 12's is too old: then this says why it did not run, as test_integrations'
    does)."""
    kubectl = kubectl_with_v1_exec()
    agent = forward_agent
    set_allowed_clients(agent, auth_server, ["ssh:hosta"])
    body = b'{"kind":"Status","apiVersion":"v1","status":"Success","message":"hello from the stand-in"}'
    cert, key, ca_data = self_signed_tls(hosts.base)
    checked = lambda header: bool(header) and header.startswith("Bearer ") \
        and auth_server.introspect(header.removeprefix("Bearer ")).get("active") is True
    with CheckingServer(checked, {"/api/hello": ("application/json", body)}, 'Bearer realm="kube"',
                        tls=(cert, key)) as server:
        kubeconfig = hosts.base / "kubeconfig"
        kubeconfig.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "test",
            "clusters": [{"name": "test", "cluster": {"server": server.base, "certificate-authority-data": ca_data}}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": "work"}}],
            "users": [{"name": "work", "user": {"exec": {
                "apiVersion": "client.authentication.k8s.io/v1", "command": remote_authctl(agent),
                "args": ["kube-credential", "work", "--access-token"], "interactiveMode": "Never"}}}]}))
        result = forward(agent, hosts, "hosta", kubectl, "--kubeconfig", str(kubeconfig), "--request-timeout=20s",
                         "get", "--raw", "/api/hello")
        assert result.returncode == 0, result.stderr
        assert "hello from the stand-in" in result.stdout
        assert server.seen and server.seen[-1][2].startswith("Bearer ")
        agent.remember(server.seen[-1][2].removeprefix("Bearer "))
    entry = audit(agent)[-1]
    assert (entry["outcome"], entry["caller"]["via"]) == ("granted", "ssh:hosta"), entry
