"""Who is behind authctl (issue 20): git, msmtp and kubectl do not connect to the agent, they run authctl, so the
agent judges an account's allowed_clients by the program that ran its own authctl, read from the kernel. The real
clients run the recipes of docs/INTEGRATIONS.md (git's credential helper; msmtp's passwordeval, mbsync's PassCmd,
neomutt's and aerc's credential commands against the real Dovecot of test_mail.py; kubectl's exec plugin) against an
account whose allowed_clients names only that client's binary, and are served; the mail clients are refused by an
account that names another program; other programs running the same authctl, and a copy of authctl elsewhere (also
one found first on PATH), are refused; the audit, the refusal and the consent question name the chain."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import tomllib

import pytest

from conftest import REPO, SYSTEM_PATH, bin_dir, default_account, wait_for
from mailserver import USER
from test_integrations import (SHA, git_server, kube_api_taking_access_tokens, kubectl_with_v1_exec, parse_basic,
                               run_kubectl)
from test_mail import (ACCOUNT, explain, mail_auth_server, mail_server,  # noqa: F401 (fixtures)
                       message, neomutt_args, on_terminal, recipe, run, subjects, synced_subjects,
                       write_aerc_config, write_mbsyncrc, write_msmtprc, write_neomuttrc)

# On both identity paths (with SO_PEERPIDFD and as kernels without it), and against the installed package.
pytestmark = [pytest.mark.usefixtures("kernel_paths"), pytest.mark.release]

ACCESS_DENIED = 7  # authctl's exit code for the wire code access_denied


def relay() -> str:
    """The agent's own authctl, as the kernel names it."""
    return os.path.realpath(bin_dir() / "authctl")


def me() -> str:
    """This test's interpreter, as the kernel names it: the program behind authctl when the test runs it."""
    return os.readlink("/proc/self/exe")


def audit(agent, account: str) -> list[dict]:
    result = agent.authctl("audit", "--json", "--account", account)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["entries"]


def listed_agent(make_agent, keyring, server, account: str, allowed: list[str], **extra):
    agent = make_agent(server=server, accounts={account: default_account(
        server.issuer, allowed_clients=allowed, redirect_path="/oauth2/callback/work", **extra)})
    agent.login(account)
    agent.remember(keyring.secret_tool_lookup(account, server.issuer))
    return agent


def documented_allow_list() -> list[str]:
    """The allowed_clients example of docs/INTEGRATIONS.md, as printed: the git and msmtp tests use it."""
    text = (REPO / "docs" / "INTEGRATIONS.md").read_text()
    section = text[text.index("## Which programs get tokens"):]
    line = next(line for line in section.splitlines() if line.startswith("allowed_clients = ["))
    return tomllib.loads(line)["allowed_clients"]


def with_authctl_on_path(env: dict, directory=None) -> dict:
    return dict(env, PATH=f"{directory or bin_dir()}:{SYSTEM_PATH}")


# ----------------------------------------------------------------------------------------------------------------
# git (credential helper)

GIT_REMOTE_HTTP = os.path.realpath(shutil.which("git-remote-https", path="/usr/lib/git-core:/usr/libexec/git-core")
                                   or "/usr/lib/git-core/git-remote-http")


def run_git_with_helper(agent, server, *args: str) -> subprocess.CompletedProcess:
    """The recipe's helper line (`!authctl git-credential --account NAME`), authctl on PATH, no other git config."""
    env = with_authctl_on_path(dict(agent.env, GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL="/dev/null",
                                    GIT_TERMINAL_PROMPT="0", GIT_ASKPASS="", SSH_ASKPASS=""))
    return subprocess.run(["git", "-c", "credential.helper=",
                           "-c", f"credential.{server.base}.helper=!authctl git-credential --account work", *args],
                          env=env, cwd=agent.home, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("allowed", ["remote_helper_only", "documented"])
def test_git_over_http_is_served_when_allowed_clients_names_gits_remote_helper(make_agent, keyring, auth_server,
                                                                                allowed):
    listed = [GIT_REMOTE_HTTP] if allowed == "remote_helper_only" else documented_allow_list()
    assert GIT_REMOTE_HTTP in listed, "the documented example names the remote helper where this machine has it"
    agent = listed_agent(make_agent, keyring, auth_server, "work", listed)
    with git_server(auth_server) as server:
        result = run_git_with_helper(agent, server, "ls-remote", f"{server.base}/repo.git")
        assert result.returncode == 0, result.stderr
        assert f"{SHA}\trefs/heads/main" in result.stdout
        _, token = parse_basic(server.authorizations()[0])
    agent.remember(token)
    [entry] = audit(agent, "work")
    print(agent.authctl("audit").stdout)  # the report quotes a real run
    assert (entry["outcome"], entry["reason"], entry["caller"]["exe"]) == ("granted", "listed", GIT_REMOTE_HTTP)
    # git runs `!` helpers with `sh -c`; dash may exec authctl in its place, so the shell may or may not be there.
    assert entry["caller"]["relayed_by"][-1] == relay()
    assert set(entry["caller"]["relayed_by"][:-1]) <= {"/usr/bin/dash", "/usr/bin/bash"}


def test_git_credential_fill_is_git_itself(make_agent, keyring, auth_server):
    """`git credential fill` (what scripts run) asks the helper from /usr/bin/git: listed, served; the remote
    helper alone is not enough then."""
    agent = listed_agent(make_agent, keyring, auth_server, "work", ["/usr/bin/git"])
    env = with_authctl_on_path(dict(agent.env, GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL="/dev/null"))
    result = subprocess.run(["git", "-c", "credential.helper=!authctl git-credential --account work", "credential",
                             "fill"], input="protocol=https\nhost=git.example.com\n\n", env=env, cwd=agent.home,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    password = next(line[9:] for line in result.stdout.splitlines() if line.startswith("password="))
    agent.remember(password)
    [entry] = audit(agent, "work")
    assert (entry["outcome"], entry["caller"]["exe"]) == ("granted", "/usr/bin/git")


# ----------------------------------------------------------------------------------------------------------------
# msmtp (passwordeval), against the real Dovecot


@pytest.fixture
def msmtp_agent(make_agent, keyring, mail_auth_server):
    return listed_agent(make_agent, keyring, mail_auth_server, ACCOUNT, ["/usr/bin/msmtp"])


@pytest.mark.parametrize("allowed", ["msmtp_only", "documented"])
def test_msmtp_passwordeval_is_served_when_allowed_clients_names_msmtp(make_agent, keyring, mail_auth_server,
                                                                       mail_server, allowed):
    listed = ["/usr/bin/msmtp"] if allowed == "msmtp_only" else documented_allow_list()
    agent = listed_agent(make_agent, keyring, mail_auth_server, ACCOUNT, listed)
    write_msmtprc(agent, mail_server, recipe("**msmtp**", mail_server))
    result = run(agent, mail_server, ["msmtp", "-a", ACCOUNT, "bob@example.test"], input=message("relayed"))
    assert result.returncode == 0, explain(result, mail_server)
    assert mail_server.sink.messages[-1][:2] == (f"<{USER}>", ["<bob@example.test>"])
    [entry] = audit(agent, ACCOUNT)
    assert (entry["outcome"], entry["reason"], entry["caller"]["exe"]) == ("granted", "listed", "/usr/bin/msmtp")
    assert entry["caller"]["relayed_by"][-1] == relay()
    human = agent.authctl("audit").stdout
    print(human)  # the report quotes a real run
    assert "/usr/bin/msmtp via " in human and " via authctl pid " in human
    assert "peer_exe=/usr/bin/msmtp" in agent.log() and "peer_relayed_by=" in agent.log()


def test_a_copy_of_authctl_cannot_relay_even_when_msmtp_runs_it(msmtp_agent, mail_server):
    """A program named authctl found first on PATH (say ~/bin/authctl), run by the listed msmtp as the recipe
    prints it: judged as itself, not as msmtp, so refused; the same bytes as the real authctl make no difference."""
    agent = msmtp_agent
    fake = agent.home / "bin"
    fake.mkdir()
    shutil.copy2(bin_dir() / "authctl", fake / "authctl")
    write_msmtprc(agent, mail_server, recipe("**msmtp**", mail_server))
    env = with_authctl_on_path(agent.env, fake)
    env.update(SSL_CERT_FILE=mail_server.cafile)
    result = subprocess.run(["msmtp", "-a", ACCOUNT, "bob@example.test"], input=message("not relayed"), env=env,
                            cwd=agent.home, capture_output=True, timeout=60, start_new_session=True)
    assert result.returncode != 0, explain(result, mail_server)
    assert b"access_denied" in result.stderr or b"does not serve" in result.stderr, explain(result, mail_server)
    [entry] = audit(agent, ACCOUNT)
    assert (entry["outcome"], entry["reason"], entry["caller"]["exe"]) == ("denied", "not_listed", str(fake / "authctl"))
    assert "relayed_by" not in entry["caller"]


def test_other_programs_running_authctl_are_refused(msmtp_agent):
    """The same authctl, run by this test's interpreter directly, through `/usr/bin/env sh -c`, and through a chain of
    more shells than the agent walks: access_denied, naming the program behind authctl and what to list."""
    agent = msmtp_agent
    authctl = str(bin_dir() / "authctl")
    direct = agent.authctl("token", ACCOUNT)
    assert direct.returncode == ACCESS_DENIED and direct.stdout == "", direct
    assert f"{me()} via authctl" in direct.stderr and f'add "{me()}"' in direct.stderr, direct.stderr

    through_sh = subprocess.run(["/usr/bin/env", "sh", "-c", f"'{authctl}' token {ACCOUNT}; exit $?"], env=agent.env,
                                capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert through_sh.returncode == ACCESS_DENIED and through_sh.stdout == "", through_sh
    assert f"{me()} via dash via authctl" in through_sh.stderr, through_sh.stderr

    nested = f"'{authctl}' token {ACCOUNT}; exit $?"
    for _ in range(5):  # `; exit $?` keeps each shell from exec'ing the next command in its place
        nested = f"sh -c {shlex_quote(nested)}; exit $?"
    deep = subprocess.run(["/bin/sh", "-c", nested], env=agent.env, capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)
    assert deep.returncode == ACCESS_DENIED and deep.stdout == "", deep
    assert "the program that ran authctl cannot be identified" in deep.stderr, deep.stderr

    entries = audit(agent, ACCOUNT)
    assert [(e["outcome"], e["reason"], e["caller"].get("exe"), e["caller"]["relayed_by"]) for e in entries] == [
        ("denied", "not_listed", me(), [relay()]),
        ("denied", "not_listed", me(), ["/usr/bin/dash", relay()]),
        ("denied", "unidentified", None, [relay()]),
    ]


ORPHAN = """
import os, sys, time
parent = os.getpid()
if os.fork() == 0:
    # Run authctl only once the program that started it has exited, so the kernel has given it to another parent.
    deadline = time.monotonic() + 30
    while os.getppid() == parent and time.monotonic() < deadline:
        time.sleep(0.01)
    os.execv(sys.argv[1], [sys.argv[1], "token", sys.argv[2]])
"""


def test_an_authctl_whose_program_exited_is_not_judged_as_that_program(msmtp_agent):
    """The listed program (a copy of the Python interpreter) starts authctl and exits before authctl connects: the
    request is judged as whoever inherited authctl (this test, a subreaper; else init), never as the program that is
    gone."""
    agent = msmtp_agent
    starter = agent.base / "starter" / "python3"
    starter.parent.mkdir(mode=0o700)
    shutil.copy2(os.path.realpath("/usr/bin/python3"), starter)
    agent.write_config(agent.config_path.read_text().replace('allowed_clients = ["/usr/bin/msmtp"]',
                                                             f'allowed_clients = ["{starter}"]'))
    assert agent.authctl("reload").returncode == 0

    def start(program: str) -> None:
        run = subprocess.run([str(starter), "-c", program, str(bin_dir() / "authctl"), ACCOUNT], env=agent.env,
                             timeout=60, stdin=subprocess.DEVNULL, capture_output=True, text=True)
        assert run.returncode == 0, run.stderr

    # While it waits for authctl, the listed program is served.
    start("import subprocess, sys; subprocess.run([sys.argv[1], 'token', sys.argv[2]], check=True, "
          "stdout=subprocess.DEVNULL)")
    start(ORPHAN)
    wait_for(lambda: len(audit(agent, ACCOUNT)) == 2, 30, "the orphaned authctl's request to be decided")
    served, orphan = audit(agent, ACCOUNT)
    assert (served["outcome"], served["caller"]["exe"]) == ("granted", str(starter))
    assert orphan["outcome"] == "denied" and orphan["reason"] in ("not_listed", "unidentified"), orphan
    assert orphan["caller"].get("exe") != str(starter) and orphan["caller"]["relayed_by"][-1] == relay()


def shlex_quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def test_listing_authctl_itself_still_serves_whatever_runs_it(make_agent, keyring, auth_server):
    agent = listed_agent(make_agent, keyring, auth_server, "work", [relay()])
    assert agent.token("work")
    [entry] = audit(agent, "work")
    assert (entry["outcome"], entry["reason"], entry["caller"]["exe"], entry["caller"]["relayed_by"]) == \
        ("granted", "listed", me(), [relay()])


def test_first_use_asks_about_the_program_behind_authctl(make_agent, keyring, auth_server):
    """The consent question names the program (its key) and the chain (`authctl pending`, the event)."""
    agent = listed_agent(make_agent, keyring, auth_server, "work", [], confirm="first-use")
    waiting = agent.authctl_popen("token", "work")
    try:
        from conftest import read_until
        prompt = read_until(waiting.stderr, "in a terminal", 30)
        assert f"tokens to {me()}" in prompt, prompt
        [pending] = json.loads(agent.authctl("pending", "--json").stdout)["requests"]
        assert pending["client"] == me() and pending["caller"]["relayed_by"] == [relay()]
        assert f"{me()} via authctl pid {waiting.pid}" in agent.authctl("pending").stdout
    finally:
        waiting.kill()
        waiting.communicate(timeout=30)


@pytest.mark.parametrize("verb", ["git-credential", "kube-credential"])
def test_a_credential_helper_says_how_to_answer_a_first_use_question(make_agent, keyring, auth_server, verb):
    """git and kubectl show a helper's stderr: while the agent asks about a first use, the helper says what to run,
    rather than seeming to hang until the question times out."""
    agent = listed_agent(make_agent, keyring, auth_server, "work", [], confirm="first-use")
    if verb == "git-credential":
        args, request = ["git-credential", "--account", "work", "get"], "protocol=https\nhost=git.example\n\n"
    else:
        args, request = ["kube-credential", "work"], ""
    waiting = subprocess.Popen([str(agent.bins / "authctl"), *args], env=agent.env, stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        waiting.stdin.write(request)
        waiting.stdin.close()
        from conftest import read_until
        prompt = read_until(waiting.stderr, "in a terminal", 30)
        [pending] = json.loads(agent.authctl("pending", "--json").stdout)["requests"]
        assert f"authctl approve {pending['id']}" in prompt, prompt
        assert waiting.poll() is None, "the helper gave up before the question was answered"
    finally:
        waiting.kill()
        waiting.wait(timeout=30)
        waiting.stdout.close()
        waiting.stderr.close()


# ----------------------------------------------------------------------------------------------------------------
# mbsync (PassCmd), neomutt (its oauth refresh commands) and aerc (its cred-cmds), against the real Dovecot: each
# runs the recipe's `authctl token gmail` with `sh -c`

MAIL_CLIENTS = ["mbsync", "neomutt", "aerc"]


def use_mail_client(client: str, agent, mail_server, subject: str) -> str:
    """Runs `client`, set up with its recipe as printed, for something that needs a token: mbsync syncs the inbox,
    neomutt sends in batch mode, aerc opens the inbox on a terminal. Asserts that it did; returns its output."""
    if client == "mbsync":
        inbox = write_mbsyncrc(agent, mail_server)
        mail_server.maildir.deliver(message(subject), (mail_server.uid, mail_server.gid))
        result = run(agent, mail_server, ["mbsync", ACCOUNT])
        assert result.returncode == 0, explain(result, mail_server)
        assert subject in synced_subjects(inbox)
        return (result.stdout + result.stderr).decode(errors="replace")
    if client == "neomutt":
        write_neomuttrc(agent, mail_server)
        result = run(agent, mail_server, [*neomutt_args(mail_server), "-s", subject, "bob@example.test"],
                     input=b"sent by neomutt through the relay\n")
        assert result.returncode == 0, explain(result, mail_server)
        assert subject in subjects(mail_server.maildir.messages())
        return (result.stdout + result.stderr).decode(errors="replace")
    write_aerc_config(agent, mail_server)
    mail_server.maildir.deliver(message(subject), (mail_server.uid, mail_server.gid))
    return on_terminal(agent, mail_server, ["aerc"], [(subject, b":quit\r")])


@pytest.mark.parametrize("client", MAIL_CLIENTS)
def test_mail_client_is_served_when_allowed_clients_names_it(make_agent, keyring, mail_auth_server, mail_server,
                                                             client):
    binary = f"/usr/bin/{client}"
    agent = listed_agent(make_agent, keyring, mail_auth_server, ACCOUNT, [binary])
    use_mail_client(client, agent, mail_server, f"{client} relayed")  # short: aerc cuts subjects
    entries = audit(agent, ACCOUNT)
    assert entries and all((e["outcome"], e["reason"], e["caller"]["exe"]) == ("granted", "listed", binary)
                           for e in entries), entries
    for entry in entries:
        assert entry["caller"]["relayed_by"][-1] == relay()
        # `sh -c`: dash may exec authctl in its place, so the shell may or may not be there.
        assert set(entry["caller"]["relayed_by"][:-1]) <= {"/usr/bin/dash"}, entry
    human = agent.authctl("audit").stdout
    print(human)  # the report quotes a real run
    assert f"{binary} via " in human and " via authctl pid " in human


def refused_mail_client(client: str, agent, mail_server) -> str:
    """Runs `client` as use_mail_client does; asserts that it failed; returns what its user saw: its output, or for
    aerc (which fails to start) its terminal."""
    if client == "aerc":
        write_aerc_config(agent, mail_server)
        return on_terminal(agent, mail_server, ["aerc"], [], status=1)
    if client == "mbsync":
        write_mbsyncrc(agent, mail_server)
        result = run(agent, mail_server, ["mbsync", ACCOUNT])
    else:
        write_neomuttrc(agent, mail_server)
        result = run(agent, mail_server, [*neomutt_args(mail_server), "-s", "not relayed", "bob@example.test"],
                     input=b"refused\n")
    assert result.returncode != 0, explain(result, mail_server)
    return (result.stdout + result.stderr).decode(errors="replace")


@pytest.mark.parametrize("client", MAIL_CLIENTS)
def test_mail_client_is_refused_when_allowed_clients_names_another_program(make_agent, keyring, mail_auth_server,
                                                                           mail_server, client):
    """The same recipe, an account listing only msmtp: refused, and the user reads why and what to add (aerc shows
    authctl's message only through the recipe's `2>/dev/tty`: it keeps a command's stderr to itself)."""
    binary = f"/usr/bin/{client}"
    agent = listed_agent(make_agent, keyring, mail_auth_server, ACCOUNT, ["/usr/bin/msmtp"])
    seen = refused_mail_client(client, agent, mail_server)
    assert f"account '{ACCOUNT}' does not serve {binary} via " in seen and f'add "{binary}"' in seen, seen
    assert "Login:" not in mail_server.log() and not mail_server.sink.messages
    entries = audit(agent, ACCOUNT)
    assert entries and all((e["outcome"], e["reason"], e["caller"]["exe"], e["caller"]["relayed_by"][-1]) ==
                           ("denied", "not_listed", binary, relay()) for e in entries), entries


# ----------------------------------------------------------------------------------------------------------------
# kubectl (exec credential plugin)


def test_kubectl_exec_plugin_is_served_when_allowed_clients_names_kubectl(make_agent, keyring, auth_server):
    kubectl = kubectl_with_v1_exec()
    binary = os.path.realpath(kubectl)  # the path as the kernel names it (symlinks resolved)
    agent = listed_agent(make_agent, keyring, auth_server, "work", [binary])
    with kube_api_taking_access_tokens(agent, auth_server) as (server, kubeconfig):
        result = run_kubectl(agent, kubectl, kubeconfig, "get", "--raw", "/api/hello")
        assert result.returncode == 0, result.stderr
        agent.remember(server.authorizations()[-1][7:])
    [entry] = audit(agent, "work")
    assert (entry["outcome"], entry["reason"], entry["caller"]["exe"], entry["caller"]["relayed_by"]) == \
        ("granted", "listed", binary, [relay()]), "kubectl runs the plugin itself, without a shell"

