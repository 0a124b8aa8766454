"""Tokens on the hosts you SSH into (issue 45): `authctl forward HOST [ssh arguments]` through real OpenSSH servers
on loopback (sshserver.py: two sshd with different host keys standing for `hosta` and `hostb`), the real ssh client,
the real agent, keyring and authorization server. The remote command is the real authctl, run by sshd with sshd's
environment: no XDG_RUNTIME_DIR, SSH_CONNECTION set, AUTH_AGENT_SOCKET only where the server accepts it (hosta).

What it shows: a host is named `ssh:HOST` with the key ssh was shown (audit `via`, `host_key`); its rule serves it and
not the other host; an account without allowed_clients asks about it, and a new host key is asked about again; the
session's socket serves only its ssh and is gone when ssh exits, and a dropped session's stale socket does not stop
the next; a bare `ssh -R` of the agent's socket is refused as an unknown forward; a host may get tokens and nothing
else (no login, approve or status of other accounts); a sign-in it needs is refused there with exit 4.

The commands docs/INTEGRATIONS.md's "SSH hosts" prints run as printed, taken from its blocks: on the desktop with
the ssh configuration given by `-F` after the host (a person's is in ~/.ssh/config), on a host with authctl copied to
the directory first on its PATH (`on_path`), only host names, ports, URLs and accounts replaced."""
import glob
import json
import os
import shlex
import shutil
import socket
import subprocess

import pytest

from conftest import REPO, bin_dir, default_account, read_until, render_config, short_tmpdir, wait_for
from readme_blocks import recipe_block
from sshserver import SSH, SSHHosts
from test_dpop import dpop_server, resource  # noqa: F401 (a fixture)
from test_identity import UnitCgroup, audit, cgroup_mounts, run_in_terminal
from test_integrations import CheckingServer, git_server, kubectl_with_v1_exec, self_signed_tls
from test_sandbox import sandbox_agent, set_allowed_clients  # noqa: F401 (a fixture)
from test_notifications import notification_server, notifications  # noqa: F401 (a fixture)

pytestmark = pytest.mark.release  # a few ssh sessions each; also against the installed package


# Where the hosts find authctl: copies in the hosts' own directory, which every host sees at the same path.
REMOTE_BINS: dict[str, str] = {}
HOSTS_BASE = []


@pytest.fixture(scope="module")
def hosts():
    base = short_tmpdir("aa-ssh-")
    hosts = SSHHosts(base)
    HOSTS_BASE[:] = [base]
    yield hosts
    hosts.stop()
    REMOTE_BINS.clear()


@pytest.fixture
def forward_agent(sandbox_agent):
    """An agent signed in to `work`, whose consent questions wait 60 s: the sandbox tests' own."""
    return sandbox_agent


def remote_authctl(agent) -> str:
    """The authctl a host runs: a copy of the agent's in the hosts' directory. A host whose sshd has a /tmp of its
    own (hostb) does not see the checkout's binaries when the checkout lives under /tmp."""
    source = str(agent.bins / "authctl")
    if source not in REMOTE_BINS:
        directory = HOSTS_BASE[0] / f"bin-{len(REMOTE_BINS)}"
        directory.mkdir()
        REMOTE_BINS[source] = shutil.copy2(source, directory / "authctl")
    return str(REMOTE_BINS[source])


def on_path(agent, hosts) -> str:
    """`authctl` as a person types it on a host, where the agent's authctl was copied to a directory on the PATH
    (INTEGRATIONS.md, "What the host needs"). The commands INTEGRATIONS.md prints run with it as printed."""
    return hosts.install(agent.bins / "authctl")


def printed(label: str, words: str) -> str:
    """The line of INTEGRATIONS.md's "SSH hosts" block after the paragraph starting with `label` that holds `words`,
    without its comment."""
    block = recipe_block(REPO / "docs" / "INTEGRATIONS.md", "## SSH hosts", label)
    [line] = [line for line in block.splitlines() if words in line]
    return line.split("  #", 1)[0].strip()


def forward(agent, hosts, host, *remote, timeout=60, on_path=False) -> subprocess.CompletedProcess:
    """`authctl forward HOST -F CONFIG REMOTE...`: ssh's exit status is authctl's. `on_path`: the agent's authctl is
    the one on the hosts' PATH (a remote command that runs `authctl` as printed)."""
    if on_path:
        hosts.install(agent.bins / "authctl")
    return agent.authctl("forward", host, "-F", str(hosts.config), *remote, timeout=timeout)


def forward_popen(agent, hosts, host, *remote) -> subprocess.Popen:
    return agent.authctl_popen("forward", host, "-F", str(hosts.config), *remote)


def answer_the_question(agent, waiting: subprocess.Popen, *answer: str, check=None) -> subprocess.CompletedProcess:
    """Waits until the forwarded request `waiting` asks, checks its one pending question with `check`, answers it in
    a terminal on the desktop (`authctl APPROVE-OR-DENY [--this-run] ID`) and returns how the remote side ended (its
    stderr after the answer's output, the waiting message included)."""
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
        return subprocess.CompletedProcess(waiting.args, waiting.returncode, out, output + said + err)
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

    # INTEGRATIONS.md's "any ssh arguments after the host" line as printed (build-box: hosta, 2222: its port, jump:
    # hostb), with a remote command: the forward goes through the jump host and is still hosta, by its own key.
    words = shlex.split(printed("`authctl forward HOST` opens", "-J jump"))
    words = [{"build-box": "hosta", "2222": str(hosts["hosta"].port), "jump": "hostb"}.get(w, w) for w in words]
    jumped = agent.authctl(*words[1:3], "-F", str(hosts.config), *words[3:], on_path(agent, hosts), "token", "work",
                           timeout=60)
    assert jumped.returncode == 0, jumped.stderr
    agent.remember(jumped.stdout.strip())
    entry = audit(agent)[-1]
    assert (entry["outcome"], entry["caller"]["via"], entry["caller"]["host_key"]) == (
        "granted", "ssh:hosta", hosts["hosta"].fingerprint), entry

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


def test_an_account_without_a_policy_asks_about_a_host_and_again_when_its_key_changed(forward_agent, hosts,
                                                                                       notification_server):
    """The host is asked about, by name and key; the answer is remembered for both. The host's new key (it was
    reinstalled) makes it a new host, asked about again, and that question says the key changed and from which key
    (issue 54): in the desktop notification, `authctl pending` and what the waiting host's authctl prints."""
    agent = forward_agent
    assert agent.token("work"), "a program on this computer is served as before"

    def approve_next_request(previous=None):
        key = hosts['hosta'].fingerprint

        def check(pending):
            assert pending["account"] == "work", pending
            assert pending["client"] == f"ssh:hosta@{key}", pending
            assert pending["caller"]["via"] == "ssh:hosta" and pending["caller"]["remote_program"] == "/usr/bin/timeout"
            assert pending.get("previous_host_key") == previous, pending
            shown = " ".join(agent.authctl("pending").stdout.split())
            assert f"host hosta over ssh (host key {key}) running /usr/bin/timeout (said by the host, " \
                "not verified) local ssh pid" in shown, shown
            changed = f"the host key of hosta changed: you allowed it before with host key {previous}, and it now presents {key}"
            assert (changed in shown) == (previous is not None), shown
            wait_for(lambda: any(n.get("summary", "").startswith("Allow the host hosta") and key in n.get("body", "")
                                 for n in notifications(notification_server)), 10, "the question's notification")
            [asked] = [n for n in notifications(notification_server) if key in n.get("body", "")]
            if previous is None:
                assert asked["summary"] == "Allow the host hosta to use work?", asked
                assert "changed" not in asked["body"], asked
            else:
                assert asked["summary"] == "Allow the host hosta, whose host key changed, to use work?", asked
                assert f"Its host key changed: you allowed hosta before with host key {previous}, and it now presents " \
                    f"{key}." in asked["body"], asked

        # Run by another program on the host (timeout, standing for git or a mail client): the host says which.
        waiting = forward_popen(agent, hosts, "hosta", "timeout", "50", remote_authctl(agent), "token", "work")
        result = answer_the_question(agent, waiting, "approve", check=check)
        assert result.returncode == 0 and "Allowed" in result.stderr, result.stderr
        told = " ".join(result.stderr.split())
        said = f"(its host key changed: it was allowed before with host key {previous})"
        assert (said in told) == (previous is not None), told

    approve_next_request()
    again = forward(agent, hosts, "hosta", remote_authctl(agent), "token", "work")
    assert again.returncode == 0, "the decision is remembered for the host and its key: " + again.stderr
    agent.remember(again.stdout.strip())
    assert audit(agent)[-1]["reason"] == "approved"

    # The host now shows another key (which the user accepted in known_hosts): a new host, asked again, saying so.
    old = hosts["hosta"].fingerprint
    hosts.rekey("hosta")
    approve_next_request(previous=old)


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
        assert not os.path.exists(stale), "authctl on the host removed the dead socket it passed"
    finally:
        if os.path.exists(stale):
            os.unlink(stale)


def host_sockets(hosts, name) -> list[str]:
    """The forwards' socket files in host `name`'s /tmp (hostb's own /tmp, as this machine sees it)."""
    return sorted(glob.glob(str(hosts[name].tmp / "auth-agent-forward-*.sock")))


def test_ended_sessions_leave_no_dead_sockets_on_the_host(forward_agent, hosts, auth_server):
    """sshd leaves a forward's socket behind when the session ends; authctl on the host removes the dead ones of its
    user whenever it looks for a forward, so sessions do not pile them up in the host's /tmp."""
    agent = forward_agent
    set_allowed_clients(agent, auth_server, ["ssh:hostb"])
    for _ in range(3):
        result = forward(agent, hosts, "hostb", remote_authctl(agent), "token", "work")
        assert result.returncode == 0, result.stderr
        agent.remember(result.stdout.strip())
        # Only the session that just ended is left: its own authctl removed the earlier ones.
        assert len(host_sockets(hosts, "hostb")) == 1, host_sockets(hosts, "hostb")
    # authctl in a later plain ssh session to the host looks for a forward, finds none alive and removes the last one.
    plain = subprocess.run([SSH, "-F", str(hosts.config), "hostb", remote_authctl(agent), "token", "work"],
                           env=agent.env, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert plain.returncode == 3, plain.stderr
    assert host_sockets(hosts, "hostb") == []


def test_a_bare_ssh_R_of_the_agents_socket_is_refused_as_an_unknown_forward(forward_agent, hosts, auth_server):
    agent = forward_agent
    remote = "/tmp/auth-agent-bare-test.sock"

    def bare():
        if os.path.exists(remote):
            os.unlink(remote)
        return subprocess.run([SSH, "-F", str(hosts.config), "-o", "ExitOnForwardFailure=yes",
                               "-R", f"{remote}:{agent.socket_path}", "hosta",
                               f"AUTH_AGENT_SOCKET={remote} {remote_authctl(agent)} token work; rc=$?; rm -f {remote}; exit $rc"],
                              env=agent.env, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)

    result = bare()
    assert result.returncode == 7 and result.stdout == "", result.stderr
    assert "authctl forward" in result.stderr, result.stderr
    entry = audit(agent)[-1]
    assert (entry["outcome"], entry["reason"], entry["caller"]["via"]) == ("denied", "unknown_forward", "ssh:unknown-host")
    doctor = json.loads(agent.authctl("doctor", "--json", timeout=60).stdout)
    [check] = [c for c in doctor["checks"] if c["check"] == "forwards"]
    assert check["status"] == "warn" and "authctl forward HOST" in check["hint"], check
    # INTEGRATIONS.md: listing "ssh:unknown-host" admits every host forwarded to this way.
    set_allowed_clients(agent, auth_server, ["ssh:unknown-host"])
    admitted = bare()
    assert admitted.returncode == 0, admitted.stderr
    agent.remember(admitted.stdout.strip())


def test_a_unit_entry_never_serves_a_host_reached_from_that_unit(forward_agent, hosts, auth_server):
    """Issue 53, hole 2: a forward keeps the local ssh's unit. With `allowed_clients = ["unit:deploy.service"]`, a
    host reached by `authctl forward` from that unit, and a bare `ssh -R` of the agent's socket from it, used to get
    tokens. A forwarded caller is matched by `ssh:` entries only: both are refused, and the refusal advises only the
    `ssh:` spelling. The unit's cgroup is real (this machine's cgroup file system), made as systemd makes it."""
    agent = forward_agent
    mounts = cgroup_mounts()
    try:
        if not mounts:
            raise PermissionError("no cgroup2 or name=systemd hierarchy is mounted")
        cgroup = UnitCgroup(list(mounts.values()), "deploy.service")
    except OSError as e:
        pytest.skip(f"the cgroup file system is not writable here, so no ssh can be put in a unit: {e}")
    set_allowed_clients(agent, auth_server, ["unit:deploy.service"])

    def join():
        for name in cgroup.procs_files():
            with open(name, "w") as f:
                f.write(str(os.getpid()))

    def in_unit(argv):
        return subprocess.run(argv, env=agent.env, capture_output=True, text=True, timeout=60,
                              stdin=subprocess.DEVNULL, preexec_fn=join)

    remote = f"/tmp/auth-agent-unit-test-{os.getpid()}.sock"
    try:
        forwarded = in_unit([str(agent.bins / "authctl"), "forward", "hosta", "-F", str(hosts.config),
                             remote_authctl(agent), "token", "work"])
        bare = in_unit([SSH, "-F", str(hosts.config), "-o", "ExitOnForwardFailure=yes", "-R", f"{remote}:{agent.socket_path}",
                        "hosta", f"AUTH_AGENT_SOCKET={remote} {remote_authctl(agent)} token work; rc=$?; rm -f {remote}; exit $rc"])
    finally:
        cgroup.remove()
    assert forwarded.returncode == 7 and forwarded.stdout == "", forwarded.stderr
    assert 'add "ssh:hosta"' in forwarded.stderr and "unit:" not in forwarded.stderr.split("allowed_clients")[1], forwarded.stderr
    assert bare.returncode == 7 and bare.stdout == "", bare.stderr
    entries = audit(agent)[-2:]
    assert [(e["outcome"], e["reason"], e["caller"]["kind"]) for e in entries] == [
        ("denied", "not_listed", "ssh_host"), ("denied", "unknown_forward", "ssh_unknown")], entries
    assert all(e["caller"].get("unit", "").endswith("deploy.service") for e in entries), \
        "the premise: the local ssh ran in the listed unit"


def test_a_host_gets_tokens_and_nothing_else(forward_agent, hosts, auth_server, notification_server):
    agent = forward_agent
    set_allowed_clients(agent, auth_server, ["ssh:hosta"])
    login = forward(agent, hosts, "hosta", remote_authctl(agent), "login", "work")
    assert login.returncode == 9 and "may only get tokens" in login.stderr, login.stderr
    approve = forward(agent, hosts, "hosta", remote_authctl(agent), "approve", "1")
    assert approve.returncode == 9 and "may only get tokens" in approve.stderr, approve.stderr
    nested = forward(agent, hosts, "hosta", remote_authctl(agent), "forward", "--stop", "hosta")
    assert nested.returncode == 9 and "may only get tokens" in nested.stderr, nested.stderr
    # The rest of what INTEGRATIONS.md says a host may not do, in one session: each exit 9, "may only get tokens".
    verbs = ("logout work", "deny 1", "forget --client x", "pending", "audit", "reload")
    script = hosts.base / "refused.sh"
    script.write_text("".join(f'said=$("{remote_authctl(agent)}" {verb} 2>&1); echo "{verb}: $? '
                              f'$(echo "$said" | grep -c "may only get tokens")"\n' for verb in verbs))
    refused = forward(agent, hosts, "hosta", "sh", str(script))
    assert refused.stdout.splitlines() == [f"{verb}: 9 1" for verb in verbs], refused.stdout + refused.stderr
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

    doctor = forward(agent, hosts, "hosta", *shlex.split(printed("**On the host**", "authctl doctor")), on_path=True)
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

    status = forward(agent, hosts, "hosta", *shlex.split(printed("**On the host**", "authctl status")), on_path=True)
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

    # git on the host, against a server that checks the token: the helper set with INTEGRATIONS.md's `git config`
    # line as printed (the server's URL for gitlab.com's, work for gitlab), git's --global file a fresh one.
    with git_server(auth_server) as server:
        configure = printed("**On the host**", "git config --global").replace("https://gitlab.com", server.base)
        global_config = hosts.base / "host-gitconfig"
        global_config.unlink(missing_ok=True)
        script = hosts.base / "git.sh"
        script.write_text(
            f"export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL='{global_config}' GIT_TERMINAL_PROMPT=0 GIT_ASKPASS=\n"
            f"{configure.replace('--account gitlab', '--account work')} || exit 20\n"
            f"exec git ls-remote {server.base}/repo.git\n")
        result = forward(agent, hosts, "hosta", "sh", str(script), on_path=True)
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
    # INTEGRATIONS.md's line as printed, with the resource's URL.
    proof = shlex.split(printed("**On the host**", "--header --url"))
    first = forward(dpop_agent, hosts, "hosta", *[url if w == "https://api.example.com/x" else w for w in proof],
                    on_path=True)
    assert first.returncode == 0, first.stderr
    dpop_agent.remember(*(line.split(" ", 2)[-1] for line in first.stdout.splitlines()))
    asked = resource(dpop_server, first.stdout)
    assert asked.status_code == 401 and "use_dpop_nonce" in asked.headers.get("WWW-Authenticate", ""), asked.text
    # curl on the host, as a user types it there, with the resource's nonce.
    script = hosts.base / "curl.sh"
    script.write_text(f'exec curl -sS -H @<("{remote_authctl(dpop_agent)}" token work --header --url "{url}"'
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
    # authctl not on the PATH of the remote command: the remote shell's own answer and status (INTEGRATIONS.md).
    missing = forward(agent, hosts, "hosta", "PATH=/nonexistent", "authctl", "token", "work")
    assert missing.returncode == 127 and "authctl: command not found" in missing.stderr, missing.stderr
    # No agent here.
    no_agent = agent.authctl("forward", "hosta", "-F", str(hosts.config), "true",
                             env={"AUTH_AGENT_SOCKET": str(agent.base / "nothing.sock")})
    assert no_agent.returncode == 3, no_agent.stderr
    # Without ssh on PATH.
    no_ssh = agent.authctl("forward", "hosta", env={"PATH": "/nonexistent"})
    assert no_ssh.returncode == 1 and "ssh is not installed" in no_ssh.stderr, no_ssh.stderr


def test_only_a_refused_socket_forward_gets_the_hint_about_socket_forwarding(forward_agent, hosts):
    """ssh's own failures (exit 255) are shown as ssh said them; authctl's hint about AllowStreamLocalForwarding
    follows only ssh's "remote port forwarding failed"."""
    agent = forward_agent
    refused = forward(agent, hosts, "nofwd", "true")
    assert refused.returncode == 255 and "remote port forwarding failed" in refused.stderr, refused.stderr
    assert "AllowStreamLocalForwarding" in refused.stderr, refused.stderr
    # A host key ssh does not know (as after the host was reinstalled), and a port nothing listens on.
    unknown_key = forward(agent, hosts, "hosta", "-o", "UserKnownHostsFile=/dev/null", "true")
    assert unknown_key.returncode == 255 and "Host key verification failed" in unknown_key.stderr, unknown_key.stderr
    closed = forward(agent, hosts, "hosta", "-p", "1", "true")
    assert closed.returncode == 255 and "Connection refused" in closed.stderr, closed.stderr
    for failed in (unknown_key, closed):
        assert "AllowStreamLocalForwarding" not in failed.stderr and "forwarding" not in failed.stderr, failed.stderr
    # The other failures INTEGRATIONS.md lists: ssh arguments ssh -G refuses (exit 2), and the user's own
    # KnownHostsCommand, which the forward replaces for the session (and says so).
    wrong = forward(agent, hosts, "hosta", "-o", "NoSuchOption=yes", "true")
    assert wrong.returncode == 2 and "ssh -G hosta failed (exit 255)" in wrong.stderr, wrong.stderr
    own = forward(agent, hosts, "hosta", "-o", "KnownHostsCommand=/bin/true %H", "true")
    assert own.returncode == 0, own.stderr
    assert "your ssh configuration's KnownHostsCommand (/bin/true %H) is replaced for this session" in own.stderr, own.stderr


def test_the_host_names_the_program_behind_its_shells_not_the_shell(forward_agent, hosts, auth_server):
    """A remote command with shell syntax (`cd / && authctl token work && echo ...`) runs authctl from a shell, which
    the host does not name as the asking program; a program that runs a shell that runs authctl is named."""
    agent = forward_agent
    set_allowed_clients(agent, auth_server, ["ssh:hosta"])
    # (bash runs the last command of such a list in its own place, so authctl is not the last one here.)
    compound = forward(agent, hosts, "hosta", "cd / && " + remote_authctl(agent), "token", "work", "&& echo >&2 done")
    assert compound.returncode == 0, compound.stderr
    agent.remember(compound.stdout.strip())
    assert "remote_program" not in audit(agent)[-1]["caller"], audit(agent)[-1]
    behind = forward(agent, hosts, "hosta", "timeout", "50", "sh", "-c", f"'cd / && {remote_authctl(agent)} token work'")
    assert behind.returncode == 0, behind.stderr
    agent.remember(behind.stdout.strip())
    assert audit(agent)[-1]["caller"]["remote_program"] == "/usr/bin/timeout", audit(agent)[-1]


@pytest.mark.parametrize("option", ["--help", "-h"])
def test_forward_help_is_authctls(option):
    """A help option before the host is authctl's, though everything after the host is ssh's."""
    result = subprocess.run([str(bin_dir() / "authctl"), "forward", option], capture_output=True, text=True,
                            timeout=30, env={**os.environ, "COLUMNS": "80"})
    assert result.returncode == 0, result.stderr
    assert "authctl forward HOST [SSH ARGUMENTS]" in result.stdout and "--stop" in result.stdout, result.stdout
    assert result.stderr == ""


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
    script.write_text(f'"{remote_authctl(agent)}" token work || exit 20\n'
                      f'echo first-served\nread line\n"{remote_authctl(agent)}" token work\necho "second: $?"\n')
    proc = subprocess.Popen([str(agent.bins / "authctl"), "forward", "hosta", "-F", str(hosts.config), "sh", str(script)],
                            env=agent.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        first = read_until(proc.stdout, "first-served", 30).split("first-served")[0].strip()
        agent.remember(first)
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
    # authctl on the host says the forward ended on the desktop, with the exit code of an agent that is not there.
    assert "second: 3" in out, (out, err)
    assert "the forward to this host has ended on the desktop" in err and "authctl forward --stop" in err, err
    assert "cannot read from the agent" not in err and "port -2 failed" not in err, err
    assert "the forward to hosta was stopped; this ssh session goes on without it" in err, err
    again = agent.authctl("forward", "--stop", "hosta")
    assert again.returncode == 1 and "no forward to hosta is open" in again.stderr
    # The token the host got stays valid until it expires; INTEGRATIONS.md's `authctl logout work` on the desktop
    # takes it from the host now (the sign-in revoked, and with it the token).
    assert auth_server.introspect(first)["active"] is True
    assert agent.authctl("logout", "work").returncode == 0
    assert auth_server.introspect(first)["active"] is False


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


# Issue 54: the names a person types. Each test uses a plain `Host build-box` block (HostName 127.0.0.1, Port N, no
# HostKeyAlias) given with -F, as a newcomer's ssh config has it: ssh checks the key as `[127.0.0.1]:N`.

def typed(agent, config, *remote, timeout=60) -> subprocess.CompletedProcess:
    """`authctl forward build-box -F CONFIG REMOTE...`, as the person typed it."""
    return agent.authctl("forward", "build-box", "-F", str(config), *remote, timeout=timeout)


def typed_popen(agent, config, *remote, stdin=subprocess.DEVNULL) -> subprocess.Popen:
    return subprocess.Popen([str(agent.bins / "authctl"), "forward", "build-box", "-F", str(config), *remote],
                            env=agent.env, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_a_host_is_served_listed_and_stopped_by_the_alias_the_person_typed(forward_agent, hosts, auth_server):
    """Item 2: `allowed_clients = ["ssh:build-box"]` serves `authctl forward build-box`, `--list` shows build-box and
    `--stop build-box` stops it. Before: the forward was `127.0.0.1:N`, refused, and --stop found nothing."""
    agent = forward_agent
    config = hosts.plain_config("build-box", "hosta")
    key_name = f"127.0.0.1:{hosts['hosta'].port}"
    # What INTEGRATIONS.md has the person look at: `ssh -G build-box` shows the alias, and no HostKeyAlias, so ssh
    # checks the key under HostName:Port.
    shown = subprocess.run([SSH, "-G", "build-box", "-F", str(config)], capture_output=True, text=True, timeout=30)
    options = dict(line.split(" ", 1) for line in shown.stdout.splitlines() if " " in line)
    assert (options["host"], f"{options['hostname']}:{options['port']}") == ("build-box", key_name), shown.stdout
    assert "hostkeyalias" not in options, shown.stdout
    set_allowed_clients(agent, auth_server, ["ssh:build-box"])
    # INTEGRATIONS.md's remote command as printed, authctl on the host's PATH (the ssh config given with -F).
    words = shlex.split(printed("`authctl forward HOST` opens", "authctl token work"))
    on_path(agent, hosts)
    served = agent.authctl(*words[1:3], "-F", str(config), *words[3:], timeout=60)
    assert served.returncode == 0, served.stderr
    agent.remember(served.stdout.strip())
    entry = audit(agent)[-1]
    assert (entry["outcome"], entry["reason"]) == ("granted", "listed"), entry
    assert entry["caller"]["via"] == "ssh:build-box", entry
    assert (entry["caller"]["host_alias"], entry["caller"]["host"]) == ("build-box", key_name), entry
    assert entry["caller"]["host_key"] == hosts["hosta"].fingerprint
    assert f"host build-box ({key_name}) over ssh" in agent.authctl("audit").stdout
    # ssh's own name for the key still names it (it is the same host).
    set_allowed_clients(agent, auth_server, [f"ssh:{key_name}@{hosts['hosta'].fingerprint}"])
    pinned = typed(agent, config, remote_authctl(agent), "token", "work")
    assert pinned.returncode == 0, pinned.stderr
    agent.remember(pinned.stdout.strip())

    # INTEGRATIONS.md's first line, `authctl forward build-box`: a shell on the host (here reading what is typed from
    # a pipe), where the person types `authctl token work`; the forward is then listed and stopped on the desktop.
    words = shlex.split(printed("`authctl forward HOST` opens", "an interactive shell"))
    assert words[3:] == [], words
    proc = subprocess.Popen([str(agent.bins / "authctl"), *words[1:], "-F", str(config)], env=agent.env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        proc.stdin.write("authctl token work\necho served $?\n")
        proc.stdin.flush()
        agent.remember(read_until(proc.stdout, "served 0", 30).split("served 0")[0].strip())
        listed = agent.authctl("forward", "--list")
        assert listed.stdout.startswith(f"build-box ({key_name})  host key {hosts['hosta'].fingerprint}"), listed.stdout
        assert f"build-box ({key_name}), host key" in agent.authctl("status").stdout
        stopped = agent.authctl(*shlex.split(printed("**Open forwards**", "--stop"))[1:])
        assert stopped.returncode == 0 and "stopped 1 forward to build-box" in stopped.stdout, stopped.stderr
        assert not agent.status_json().get("forwards")
        proc.communicate(input="exit\n", timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, "the ssh session went on to its end"

    # An entry no forward can ever carry (ssh names port 22 without :22) says so in status and doctor.
    set_allowed_clients(agent, auth_server, ["ssh:build-box:22"])
    never = "ssh:build-box:22 never matches: ssh names a host on port 22 without :22; write ssh:build-box"
    assert never in " ".join(agent.authctl("status").stdout.split())
    assert never in " ".join(agent.authctl("doctor", timeout=60).stdout.split())


def test_a_config_that_shares_connections_hashes_keys_in_md5_and_sets_env_with_spaces_is_served(forward_agent, hosts,
                                                                                               auth_server):
    """Common ssh settings a person already has: connection sharing (`ControlMaster auto` with `ControlPersist`: a
    master ssh, another process, would carry the forward and run no KnownHostsCommand), `FingerprintHash md5` (the
    key reported as MD5:...), and a `SetEnv` value with a space (`ssh -G` prints it unquoted). Each made the forward
    serve nothing or ssh refuse to start; the session is served, with its host key, and leaves no master behind."""
    agent = forward_agent
    config = hosts.plain_config("build-box", "hosta")
    control = hosts.base / "control"
    control.mkdir(exist_ok=True)
    with open(config, "a") as f:
        f.write(f"  ControlMaster auto\n  ControlPath {control}/%C\n  ControlPersist 60\n  FingerprintHash md5\n"
                '  SetEnv GREETING="hello world" OTHER=1\n')
    set_allowed_clients(agent, auth_server, ["ssh:build-box"])
    served = typed(agent, config, remote_authctl(agent), "token", "work")
    assert served.returncode == 0, served.stderr
    agent.remember(served.stdout.strip())
    entry = audit(agent)[-1]
    assert (entry["outcome"], entry["caller"]["via"]) == ("granted", "ssh:build-box"), entry
    assert entry["caller"]["host_key"] == hosts["hosta"].fingerprint
    assert list(control.iterdir()) == [], "no shared master was started for the session"


def test_a_pinned_host_whose_key_changed_is_told_so_and_how_to_re_pin(forward_agent, hosts, auth_server):
    """Item 7: the host was reinstalled (new key, accepted in known_hosts); its pinned entry refuses it saying the
    key changed, which key was pinned and which was presented, and the entry that re-pins it. Before: `add
    "ssh:..."`, advice to drop the pin."""
    agent = forward_agent
    old = hosts["hosta"].fingerprint
    set_allowed_clients(agent, auth_server, [f"ssh:build-box@{old}"])
    hosts.rekey("hosta")
    config = hosts.plain_config("build-box", "hosta")
    new = hosts["hosta"].fingerprint
    refused = typed(agent, config, remote_authctl(agent), "token", "work")
    assert refused.returncode == 7 and refused.stdout == "", refused.stderr
    said = " ".join(refused.stderr.split())
    assert f"the host key of build-box changed: allowed_clients pins {old}, the host presented {new}" in said, said
    assert f'replace the entry with "ssh:build-box@{new}"' in said, said
    assert 'add "ssh:build-box"' not in said, said
    doctor = " ".join(agent.authctl("doctor", timeout=60).stdout.split())
    assert f"ssh:build-box is pinned to {old}, but build-box presented {new} and was refused" in doctor, doctor
    set_allowed_clients(agent, auth_server, [f"ssh:build-box@{new}"])
    again = typed(agent, config, remote_authctl(agent), "token", "work")
    assert again.returncode == 0, "re-pinned as advised: " + again.stderr
    agent.remember(again.stdout.strip())


def test_forgetting_a_host_forgets_it_under_every_key(forward_agent, hosts):
    """Item 9: an account without a policy asked about build-box under three keys (it was reinstalled in between);
    `authctl forget --client ssh:build-box@KEY` forgets it under that key only, `--client ssh:build-box` under every
    other, and the host is asked about again under the key it shows. Before: "No remembered decisions matched"."""
    agent = forward_agent
    keys = []
    for i in range(3):
        if i:
            hosts.rekey("hosta")
        config = hosts.plain_config("build-box", "hosta")
        keys.append(hosts["hosta"].fingerprint)

        def check(pending):
            assert pending["client"] == f"ssh:build-box@{keys[-1]}", pending

        waiting = typed_popen(agent, config, remote_authctl(agent), "token", "work")
        result = answer_the_question(agent, waiting, "approve", check=check)
        assert result.returncode == 0, result.stderr
    rc, output = run_in_terminal(agent, "forget", "--client", f"ssh:build-box@{keys[0]}")
    assert rc == 0, output
    assert f"Forgot: allow ssh:build-box@{keys[0]} for 'work'." in output and keys[1] not in output, output
    rc, output = run_in_terminal(agent, "forget", "--client", "ssh:build-box")
    assert rc == 0, output
    for key in keys[1:]:
        assert f"Forgot: allow ssh:build-box@{key} for 'work'." in output, output
    assert keys[0] not in output, output
    asked = typed_popen(agent, config, remote_authctl(agent), "token", "work")
    try:
        assert "in a terminal" in read_until(asked.stderr, "in a terminal", 30), "forgotten: asked again"
    finally:
        asked.kill()
        asked.wait()


def test_one_sign_in_need_of_a_host_is_one_notification(forward_agent, hosts, auth_server, keyring,
                                                          notification_server):
    """Item 8: the account's sign-in ended (its refresh token revoked) and the host asks: the desktop shows one
    notification, the one naming the host. Before: "needs you to sign in again" and, beside it, the one naming the
    host (the second was sent before the first's id was known, so it replaced nothing)."""
    agent = forward_agent
    config = hosts.plain_config("build-box", "hosta")
    set_allowed_clients(agent, auth_server, ["ssh:build-box"])
    assert auth_server.revoke(keyring.secret_tool_lookup("work", auth_server.issuer)) == 200
    needs = typed(agent, config, remote_authctl(agent), "token", "work", "--refresh")
    assert needs.returncode == 4, needs.stderr
    wait_for(lambda: any("build-box" in n.get("body", "") for n in notifications(notification_server)), 10,
             "the notification naming the host")
    shown = [n for n in notifications(notification_server) if n.get("summary") == "Sign in to work"]
    assert len({n["id"] for n in shown}) == 1, shown
    assert "host build-box" in shown[-1]["body"], shown
